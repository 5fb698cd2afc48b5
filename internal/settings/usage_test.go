package settings

import (
	"bytes"
	"os"
	"testing"
)

// TestPrintFlags: -h's flags are listed as testdata/flags.golden has them,
// by section, with their defaults and variables: the text users and their
// scripts know.
func TestPrintFlags(t *testing.T) {
	want, err := os.ReadFile("testdata/flags.golden")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	PrintFlags(&got)
	if got.String() != string(want) {
		os.WriteFile("testdata/flags.got", got.Bytes(), 0o644)
		t.Errorf("-h's flags differ from testdata/flags.golden (written to testdata/flags.got): diff testdata/flags.golden testdata/flags.got")
	}
}
