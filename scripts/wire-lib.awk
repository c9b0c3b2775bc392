# wire-lib.awk: the helpers that wire-decode.awk, wire-trace.awk and
# wire-check.awk share (awk -f wire-lib.awk -f the-program.awk). Plain
# POSIX awk: Debian's default awk is mawk.
function num(s,   v, i, c) {
	if (s !~ /^0x/)
		return s + 0
	s = tolower(substr(s, 3))
	v = 0
	for (i = 1; i <= length(s); i++) {
		c = index("0123456789abcdef", substr(s, i, 1))
		v = v * 16 + c - 1
	}
	return v
}
# Hex by hand: mawk's printf %x stops at 32 bits, and a virtual address
# has 48. Doubles hold integers up to 2^53 exactly.
function hex(v,   s, d) {
	s = ""
	while (v > 0) {
		d = v % 16
		s = substr("0123456789abcdef", d + 1, 1) s
		v = (v - d) / 16
	}
	return "0x" (s == "" ? "0" : s)
}
# Field "key" of a record's key=value details, "" if absent.
function get(info, key,   n, i, kv) {
	n = split(info, kv, " ")
	for (i = 1; i <= n; i++)
		if (index(kv[i], key "=") == 1)
			return substr(kv[i], length(key) + 2)
	return ""
}
