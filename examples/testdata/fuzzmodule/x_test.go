// Package x holds the fuzz targets TestFuzzScriptTellsRaceFromFinding runs
// scripts/fuzz on with the real go: one that holds, one whose seed fails.
package x

import "testing"

func FuzzHolds(f *testing.F) {
	f.Add("seed")
	f.Fuzz(func(t *testing.T, s string) {})
}

func FuzzBoom(f *testing.F) {
	f.Add("boom")
	f.Fuzz(func(t *testing.T, s string) {
		if s == "boom" {
			t.Fatal("boom")
		}
	})
}
