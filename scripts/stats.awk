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

# median_of(v, n): the median of v[1..n], which it sorts (sort_values).
function median_of(v, n) {
	sort_values(v, n)
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

# interval_of(v, n, b): the 95% interval of v[1..n], sorted already, as
# printed ("lo-hi", two decimals; "-" if n is too few), and its ends as
# printed, as numbers, in b[1] and b[2] (left as they were if "-").
function interval_of(v, n, b,   j, lo, hi) {
	j = interval_rank(n)
	if (!j) return "-"
	lo = sprintf("%.2f", v[j]); hi = sprintf("%.2f", v[n + 1 - j])
	b[1] = lo + 0; b[2] = hi + 0
	return lo "-" hi
}

# paired_ratios(num, den, v): into v[1..n], sorted (sort_values), the ratio
# num[key] / den[key] of each key in both with den[key] > 0; returns n.
function paired_ratios(num, den, v,   key, n) {
	for (key in den)
		if (den[key] > 0 && key in num) v[++n] = num[key] / den[key]
	sort_values(v, n)
	return n
}

# with_range(fmt, m, v, n): m and, if n > 1, the lowest and highest of
# v[1..n], sorted already, in brackets after it: "m (lo-hi)", each printed
# with fmt.
function with_range(fmt, m, v, n) {
	if (n < 2) return sprintf(fmt, m)
	return sprintf(fmt " (" fmt "-" fmt ")", m, v[1], v[n])
}
