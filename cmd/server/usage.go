package main

import (
	"slices"

	"github.com/floodgate/floodgate/internal/buildinfo"
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

// version describes the build (internal/buildinfo).
func version() string { return "floodgate " + buildinfo.String() }

// flagHint follows an error in the command line or the environment.
const flagHint = "run floodgate -h for the flags"
