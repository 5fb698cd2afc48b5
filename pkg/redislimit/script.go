package redislimit

import (
	"embed"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/redis/go-redis/v9"
)

// The Lua sources: common.lua (helpers), one file per algorithm named after
// it (fixed_window.lua, ...), and evaluate.lua, the driver.
//
//go:embed lua/*.lua
var luaFiles embed.FS

// Argument layout of evaluate.lua: a request is a header of
// argsPerRequest arguments, then argsPerHit per hit, plus argsPerCalendar
// for a hit with calendar boundaries (flagCalendar).
const (
	argsPerRequest  = 2
	argsPerHit      = 3
	argsPerCalendar = 4
)

// Flags of a hit (its third argument): the sum of the flags that apply,
// plus flagQuotaBase times (Group + 1) for a limit.Quota hit. The flags are
// bits below flagQuotaBase, so that the script reads the quota as
// floor(flags / flagQuotaBase).
const (
	flagRefund    = 1
	flagAdvisory  = 2
	flagCalendar  = 4
	flagUsage     = 8 // limit.Hit.Usage
	flagQuotaBase = 16
)

// The script returns, per request, fieldsPerDecision integers per hit, at
// these offsets: allowed (0/1), remaining, reset (µs), retry (µs), never
// (0/1), debt; then 1 if the request is blocked, as the script decided and
// applied it.
const (
	fieldAllowed = iota
	fieldRemaining
	fieldReset
	fieldRetry
	fieldNever
	fieldDebt
	fieldsPerDecision
)

// luaConstant is one constant of the contract between Go and the script,
// under its Lua name.
type luaConstant struct {
	name  string
	value int64
}

// luaConstants returns the constants the script is written against, from
// the Go constants themselves (an algorithm's code is ALG_ and its name in
// capitals): the Lua files spell none of these numbers out.
func luaConstants() []luaConstant {
	var cs []luaConstant
	for _, a := range limit.Algorithms() {
		cs = append(cs, luaConstant{"ALG_" + strings.ToUpper(a.String()), int64(a)})
	}
	return append(cs,
		luaConstant{"ARGS_PER_REQUEST", argsPerRequest},
		luaConstant{"ARGS_PER_HIT", argsPerHit},
		luaConstant{"ARGS_PER_CALENDAR", argsPerCalendar},
		luaConstant{"FLAG_REFUND", flagRefund},
		luaConstant{"FLAG_ADVISORY", flagAdvisory},
		luaConstant{"FLAG_CALENDAR", flagCalendar},
		luaConstant{"FLAG_USAGE", flagUsage},
		luaConstant{"FLAG_QUOTA_BASE", flagQuotaBase},
		luaConstant{"FIELD_ALLOWED", fieldAllowed},
		luaConstant{"FIELD_REMAINING", fieldRemaining},
		luaConstant{"FIELD_RESET", fieldReset},
		luaConstant{"FIELD_RETRY", fieldRetry},
		luaConstant{"FIELD_NEVER", fieldNever},
		luaConstant{"FIELD_DEBT", fieldDebt},
		luaConstant{"FIELDS_PER_DECISION", fieldsPerDecision},
		luaConstant{"GCRA_EPOCH", limit.GCRAEpoch},
		luaConstant{"MAX_COUNT", limit.MaxCount},
		luaConstant{"MAX_DEBT", int64(limit.MaxDebt / time.Microsecond)},
	)
}

// The script EVAL and EVALSHA send, and the library FUNCTION LOAD sends:
// the same code, the library registering evaluate under functionName.
var (
	evaluateSource  = scriptSource()
	evaluateScript  = redis.NewScript(evaluateSource)
	functionName    = "floodgate_" + evaluateScript.Hash()
	evaluateLibrary = librarySource(functionName)
)

// ScriptSHA returns the SHA-1, in hex, of the script this build sends to
// Redis (what EVALSHA names), so that tools replaying captured calls can
// tell whether they replay this build's script.
func ScriptSHA() string { return evaluateScript.Hash() }

// FunctionName returns the name of the Redis function, and of the library
// holding it, that this build calls with FCALL: "floodgate_" and
// ScriptSHA. FUNCTION LIST LIBRARYNAME 'floodgate_*' lists the versions
// loaded in a Redis.
func FunctionName() string { return functionName }

// scriptSource assembles the script sent by EVALSHA, which runs the
// definitions again at every call.
func scriptSource() string {
	return definitions() + "\nreturn evaluate(KEYS, ARGV)\n"
}

// librarySource assembles the library named name, whose definitions run
// once, when it is loaded; FCALL name runs evaluate.
func librarySource(name string) string {
	return "#!lua name=" + name + "\n" + definitions() +
		"\nredis.register_function('" + name + "', evaluate)\n"
}

// definitions assembles the code common to the script and the library.
// Each file uses only its own names, Lua's, Redis's and what it is given:
// the constants, one local each and K, a table of them all; common.lua,
// the body of a function returning its helpers, C; each algorithm's file,
// the body of a loader function(C, K) in loaders under the algorithm's
// code, run when a hit first needs it; and evaluate.lua, which defines
// evaluate(keys, args).
func definitions() string {
	var b strings.Builder
	b.WriteString("-- The Go/Lua contract, generated from the Go constants (pkg/redislimit/script.go).\n")
	cs := luaConstants()
	for _, c := range cs {
		fmt.Fprintf(&b, "local %s = %d\n", c.name, c.value)
	}
	b.WriteString("local K = {")
	for i, c := range cs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s = %s", c.name, c.name)
	}
	b.WriteString("}\n\n-- common.lua\nlocal C = (function()\n")
	b.WriteString(mustRead("common.lua"))
	b.WriteString("end)()\n\nlocal loaders = {}\n")
	for _, a := range limit.Algorithms() {
		fmt.Fprintf(&b, "\n-- %s.lua\nloaders[ALG_%s] = function(C, K)\n%s\nend\n", a, strings.ToUpper(a.String()), mustRead(a.String()+".lua"))
	}
	b.WriteString("\n-- evaluate.lua\n")
	b.WriteString(mustRead("evaluate.lua"))
	return b.String()
}

func mustRead(name string) string {
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("redislimit: missing embedded script " + name)
	}
	return string(src)
}
