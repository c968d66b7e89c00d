// Package spelling finds the name a misspelt one most likely meant, for
// the "did you mean" of an error or a warning.
package spelling

import "slices"

// Distance is the number of single-byte insertions, deletions and
// substitutions that turn a into b (Levenshtein's distance).
func Distance(a, b string) int {
	row := make([]int, len(b)+1)
	for j := range row {
		row[j] = j
	}
	for i := 1; i <= len(a); i++ {
		diagonal := row[0]
		row[0] = i
		for j := 1; j <= len(b); j++ {
			substitute := diagonal
			if a[i-1] != b[j-1] {
				substitute++
			}
			diagonal = row[j]
			row[j] = min(row[j]+1, row[j-1]+1, substitute)
		}
	}
	return row[len(b)]
}

// Closest is the candidate nearest to name, within the given number of
// edits; "" when none is that close. Of candidates equally near, the first
// in sorted order wins, so the answer does not depend on map order.
func Closest(name string, candidates []string, within int) string {
	best, bestDistance := "", within+1
	for _, c := range slices.Sorted(slices.Values(candidates)) {
		if d := Distance(name, c); d < bestDistance {
			best, bestDistance = c, d
		}
	}
	return best
}
