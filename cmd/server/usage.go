package main

import (
	"cmp"
	"fmt"
	"runtime/debug"
	"slices"
)

// usageHead is the top of -h, above settings.PrintFlags.
const usageHead = `Usage: floodgate [serve] [flags]          serve the rules (the default command)
       floodgate check [flags] [FILE_OR_DIR]
                                          validate the rules (FILE_OR_DIR, else
                                          -config's); exit 0 or 1
       floodgate explain [flags] domain key=value [key=value...]
                                          show which rule a descriptor matches
       floodgate version                  print the version and exit
       floodgate replay -old DIR -new DIR -traffic FILE [-format text|json|html]
                                          rehearse an edit of the rules on recorded
                                          traffic (floodgate replay -h)
       floodgate counters get|reset [-addr HOST:PORT] domain key=value [key=value...]
                                          show a descriptor's counters (used, remaining,
                                          reset) or reset them, on a running server's
                                          debug listener (floodgate counters -h)
The -check, -explain and -version flags do the same as the commands.

Each flag is also set by the environment variables listed under it: FLOODGATE_*
first, then the envoyproxy/ratelimit variable(s) (see docs/migrating.md). A flag
given on the command line wins over both.
`

// subcommands maps the commands to the flags that do the same.
var subcommands = map[string][]string{
	"serve": nil, "check": {"-check"}, "explain": {"-explain"}, "version": {"-version"}, "help": {"-h"},
}

// commandArgs turns a leading command (floodgate check ...) into its flag
// (floodgate -check ...); other arguments are returned as they are.
func commandArgs(args []string) []string {
	if len(args) == 0 {
		return args
	}
	if f, ok := subcommands[args[0]]; ok {
		return slices.Concat(f, args[1:])
	}
	return args
}

// stampedVersion and stampedCommit are set at link time by builds without
// the repository's history, as the image's:
// -ldflags "-X main.stampedVersion=v1.2.3 -X main.stampedCommit=abc123".
// They win over what the toolchain recorded.
var stampedVersion, stampedCommit string

// version describes the build: the module's version ("(devel)" for a
// build from a work tree) and the commit, with "+dirty" when the tree had
// changes, as the Go toolchain recorded them or the link stamped them.
func version() string {
	v, commit, dirty, goVersion := "(devel)", "unknown", false, ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		v, goVersion = cmp.Or(bi.Main.Version, v), bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if stampedCommit != "" {
		commit, dirty = stampedCommit, false
	}
	if dirty {
		commit += "+dirty"
	}
	return fmt.Sprintf("floodgate %s commit %s %s", cmp.Or(stampedVersion, v), commit, goVersion)
}

// flagHint follows an error in the command line or the environment.
const flagHint = "run floodgate -h for the flags"
