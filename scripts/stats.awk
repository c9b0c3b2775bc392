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

# interval_rank(n): the highest j for which, of n values sorted, the j-th
# lowest to the j-th highest hold the median of what they were drawn from
# with probability 1 - 2 P(X < j) of at least 95%, X binomial (n, 1/2),
# assuming only that the values are alike but for noise (n = 20: 6th to
# 15th, 95.9%); 0 if n is too few for any.
function interval_rank(n,   p, cdf, i, j) {
	p = 0.5 ^ n; cdf = p; j = 0
	for (i = 0; 2 * cdf <= 0.05 && i < n; i++) {
		j = i + 1
		p = p * (n - i) / (i + 1); cdf += p
	}
	return j
}

# interval_of(v, n): the 95% interval of v[1..n], sorted, as printed
# ("lo-hi", two decimals; "-" if n is too few): compared as printed.
function interval_of(v, n,   j) {
	j = interval_rank(n)
	return j ? sprintf("%.2f-%.2f", v[j], v[n + 1 - j]) : "-"
}
