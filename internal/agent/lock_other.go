//go:build !unix

package agent

// lockDir takes no lock where flock is missing: agents run on Linux.
func lockDir(string) (unlock func(), err error) { return func() {}, nil }
