package domain

import "time"

// Doubling is the wait after the nth failure in a row (n ≥ 1): first,
// doubled for each failure after the first, up to most.
func Doubling(first, most time.Duration, n int) time.Duration {
	d := first
	for i := 1; i < n && d < most; i++ {
		d *= 2
	}
	return min(d, most)
}
