//go:build !unix

package main

import (
	"errors"
	"os"
	"os/exec"
)

// execProgram runs the program at path as a child with this process's
// streams, and returns its exit code.
func execProgram(path string, argv, environ []string) (int, error) {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Env, cmd.Stdin, cmd.Stdout, cmd.Stderr = environ, os.Stdin, os.Stdout, os.Stderr
	err := cmd.Run()
	if exit, ok := errors.AsType[*exec.ExitError](err); ok {
		return max(exit.ExitCode(), 1), nil
	}
	return 0, err
}
