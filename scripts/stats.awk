# stats.awk: the order statistics that bench-report.sh's awk programs
# share (prepended to each program's text).  Plain POSIX awk: Debian's
# default awk is mawk.

# sort_values(v, n): sorts v[1..n] in place, as numbers.  An insertion
# sort: a few dozen values at most.
function sort_values(v, n,   i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) {
			t = v[j]; v[j] = v[j - 1]; v[j - 1] = t
		}
}

# median_of(v, n): the median of v[1..n], which sort_values has sorted.
function median_of(v, n) {
	return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
