package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/flags.golden from the command line as it reads today")

// flagCases are command lines whose output users read: -h, and one
// refusal per error message. None of them is accepted, so none starts
// anything.
var flagCases = [][]string{
	{"-h"},
	{"extra"},
	{"-conns", "x"},
	{"-rules", "-1"},
	{"-reloads", "-1"},
	{"-peers", "floodgate", "-store", "disk"},
	{"-peers", "floodgate", "-envoy"},
	{"-peers", "floodgate", "-rounds", "0"},
	{"-peers", "floodgate", "-store", "memory", "-redis-addr", "h:1"},
	{"-peers", "floodgate", "-redis-addr", "h:1"},
	{"-peers", "a=floodgate"},
	{"-peers", "envoy"},
	{"-peers", "floodgate,floor"},
	{"-peers", "floodgate,floor-redis"},
	{"-peers", "floodgate,reference"},
	{"-peers", "floodgate,limitador"},
	{"-peers", "floodgate,reference", "-reference-bin", "r", "-store", "memory"},
	{"-peers", "a=floodgate:/x,a=floodgate:/y"},
	{"-reloads", "3"},
	{"-reloads", "3", "-rules", "10", "-matrix"},
	{"-reloads", "3", "-rules", "10", "-reference-bin", "r", "-server-bin", "f"},
	{"-reloads", "3", "-rules", "10", "-settle", "-1s"},
	{"-reference-bin", "r"},
	{"-limitador-bin", "l"},
	{"-envoy", "-matrix"},
	{"-envoy", "-rounds", "0"},
	{"-envoy", "-envoy-concurrency", "0"},
	{"-envoy", "-keys", "200000"},
	{"-envoy", "-envoy-stores", "disk"},
	{"-envoy", "-envoy-stores", "redis,redis"},
	{"-envoy", "-envoy-config", "a.yaml,,b.yaml"},
	{"-envoy", "-envoys", "9"},
	{"-envoy", "-envoy-peers", "l=limitador:/l"},
	{"-envoy", "-envoy-peers", "reference"},
	{"-envoy", "-envoy-peers", "f=floor-redis:/bin/f"},
	{"-envoy", "-envoy-peers", "envoy"},
	{"-envoy", "-envoy-peers", "floor,floor"},
	{"-envoys", "2"},
	{"-matrix-concurrency", "16,x"},
	{"-limit", "sideways"},
	{"-descriptors", "0"},
	{"-keys", "0"},
	{"-concurrency", "0"},
	{"-rate", "-1"},
	{"-algorithm", "lottery"},
	{"-conns", "0"},
	{"-duration", "0s"},
	{"-warmup", "-1s"},
	{"-ceiling-duration", "0s"},
	{"-server-pid", "1"},
	{"-server-addr", "h:1", "-config", "x"},
	{"-grpc-floor", "-envoy"},
	{"-server-addr", "h:1", "-cpuprofile", "x"},
	{"-redis-addr", "unix:///tmp/redis.sock"},

	{"fleet", "-h"},
	{"fleet", "extra"},
	{"fleet", "-envoys", "x"},
	{"fleet", "-protocols", "rls,grpc"},
	{"fleet", "-envoys", "0"},
	{"fleet", "-rlqs-rate", "-1"},
	{"fleet", "-zipf", "-1"},
	{"fleet", "-window", "1500ms"},
	{"fleet", "-redis", "memcached"},
	{"fleet", "-replicas", "1"},
	{"fleet", "-redis", "cluster", "-replicas", "1", "-kill-master", "40s"},
	{"fleet", "-redis", "cluster", "-kill-master", "5s"},
	{"fleet", "-redis", "cluster", "-replicas", "1", "-kill-master", "5s"},
	{"fleet", "-duration", "0s"},
}

// TestFlagsGolden holds what the command line prints and refuses as
// testdata/flags.golden has it: the -h text of both flag sets and every
// error, word for word. Run with -update after a deliberate change.
func TestFlagsGolden(t *testing.T) {
	var got bytes.Buffer
	for _, args := range flagCases {
		var stderr bytes.Buffer
		var err error
		if len(args) > 0 && args[0] == "fleet" {
			_, err = parseFleetFlags(args[1:], &stderr)
		} else {
			_, err = parseFlags(args, &stderr)
		}
		if err == nil {
			t.Errorf("%q accepted; every case must be refused or ask for help", args)
		}
		fmt.Fprintf(&got, "$ bench %s\n%serror: %v\n\n", strings.Join(args, " "), stderr.String(), err)
	}
	if *update {
		if err := os.WriteFile("testdata/flags.golden", got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile("testdata/flags.golden")
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		os.WriteFile("testdata/flags.got", got.Bytes(), 0o644)
		t.Errorf("the command line's text differs from testdata/flags.golden (written to testdata/flags.got): diff testdata/flags.golden testdata/flags.got")
	}
}
