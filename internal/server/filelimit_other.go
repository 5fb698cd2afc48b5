//go:build !unix

package server

// fileLimit returns 0: the file limit is unknown on this system.
func fileLimit() int { return 0 }
