package redislimit

import (
	"embed"
	"fmt"
	"strings"

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
// plus flagQuota times (Group + 1) for a limit.Quota hit.
const (
	flagRefund   = 1
	flagAdvisory = 2
	flagCalendar = 4
	flagQuota    = 8
)

// fieldsPerHit is the number of integers the script returns per hit.
const fieldsPerHit = 5

// evaluateScript is the one script that decides a request: its SHA is what
// EVALSHA sends.
var evaluateScript = redis.NewScript(scriptSource())

// ScriptSHA returns the SHA-1, in hex, of the script this build sends to
// Redis (what EVALSHA names and SCRIPT EXISTS checks), so tools replaying
// captured calls can tell whether they replay this build's script.
func ScriptSHA() string { return evaluateScript.Hash() }

// scriptSource assembles the script: the helpers, each algorithm's file as
// the body of a loader function registered under the algorithm's code (the
// file ends by returning its table of functions), then the driver.
func scriptSource() string {
	var b strings.Builder
	b.WriteString(mustRead("common.lua"))
	for _, a := range limit.Algorithms() {
		fmt.Fprintf(&b, "\n-- %s\nloaders[%d] = function()\n%s\nend\n", a, uint8(a), mustRead(a.String()+".lua"))
	}
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
