//go:build unix

package main

import "syscall"

// execProgram replaces this process with the program at path; it returns
// only when it cannot.
func execProgram(path string, argv, environ []string) (int, error) {
	return 0, syscall.Exec(path, argv, environ)
}
