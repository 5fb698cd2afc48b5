package redislimit

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate/floodgate/pkg/internal/twin"
	"github.com/floodgate/floodgate/pkg/limit"
	"github.com/redis/go-redis/v9"
)

// The Lua sources: common.lua, one file per algorithm (fixed_window.lua,
// ...), and evaluate.lua, the driver.
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

// Flags of a hit (its third argument): the sum of those that apply, plus
// flagQuotaBase times (Group + 1) for a limit.Quota hit.
const (
	flagRefund    = 1
	flagAdvisory  = 2
	flagCalendar  = 4
	flagUsage     = 8 // limit.Hit.Usage
	flagQuotaBase = 16
)

// The script returns, per request, fieldsPerDecision integers per hit at
// these offsets (reset and retry in µs), then 1 if the request is blocked.
const (
	fieldAllowed = iota
	fieldRemaining
	fieldReset
	fieldRetry
	fieldNever
	fieldDebt
	fieldsPerDecision
)

// luaConstant is a constant of the Go/Lua contract, by its Lua name.
type luaConstant struct {
	name  string
	value int64
}

// luaConstants returns the constants the script is written against, from
// the Go ones (an algorithm's is ALG_ and its name in capitals), so that
// the Lua files spell none out.
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
		luaConstant{"GCRA_EPOCH", twin.GCRAEpoch},
		luaConstant{"MAX_COUNT", limit.MaxCount},
		luaConstant{"MAX_DEBT", int64(twin.MaxDebt / time.Microsecond)},
	)
}

// The script EVAL and EVALSHA send, which runs the definitions again at
// every call, and the library FUNCTION LOAD sends, whose definitions run
// once, when it is loaded, and which registers evaluate for FCALL under
// functionName.
var (
	evaluateSource  = definitions() + "\nreturn evaluate(KEYS, ARGV)\n"
	evaluateScript  = redis.NewScript(evaluateSource)
	functionName    = "floodgate_" + evaluateScript.Hash()
	evaluateLibrary = "#!lua name=" + functionName + "\n" + definitions() +
		"\nredis.register_function('" + functionName + "', evaluate)\n"
)

// Script names this build's Lua code as Redis knows it, to find it in
// SCRIPT and FUNCTION listings and in logs: sha is the SHA-1, in hex, of
// the script sent with EVALSHA; function is the name of the Redis
// function, and of its library, called with FCALL: "floodgate_" and sha.
func Script() (sha, function string) { return evaluateScript.Hash(), functionName }

// definitions assembles the code common to the script and the library:
// the constants, as locals and in a table K; common.lua as the body of a
// function returning its helpers, C; each algorithm's file as the body of
// a loader function(C, K), run when a hit first needs it; and
// evaluate.lua, which defines evaluate(keys, args).
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

// How a Limiter runs the Lua code, decided once per Limiter.
const (
	modeUndecided int32 = iota // no FUNCTION LOAD has answered yet
	modeFunction               // FCALL of the library evaluateLibrary
	modeScript                 // EVALSHA: Redis has no FUNCTION, or the user may not use it
)

// call runs evaluate with keys and args and returns its reply.
//
// FCALL runs only evaluate, where EVALSHA runs every definition again. The
// first call decides, by loading the library, whether Redis offers
// functions (on a Cluster, off its path); until then, and for good on a
// Redis that refuses them, calls use EVALSHA. A node that lost the library
// (a restart, FUNCTION FLUSH, a failover) answers "Function not found": it
// is loaded there and the call, which ran nothing, sent again once.
func (l *Limiter) call(ctx context.Context, keys []string, args []any) (any, error) {
	switch l.fn.mode.Load() {
	case modeFunction:
		reply, err := l.sendOnce(ctx, scriptArgs("fcall", functionName, keys, args))
		switch {
		case err == nil || !replied(err, ""):
			return reply, err
		case replied(err, "ERR Function not found"):
			if err := l.loadOn(ctx, keys); err != nil {
				if !l.fallBack(err) {
					return nil, err
				}
				break
			}
			return l.sendOnce(ctx, scriptArgs("fcall", functionName, keys, args))
		case l.fallBack(err):
			// FCALL refused (ACL): EVALSHA from now on, this call first.
		default:
			return reply, err
		}
	case modeUndecided:
		if time.Now().UnixNano() >= l.fn.retryAt.Load() && l.fn.deciding.TryLock() {
			if l.cluster != nil {
				// Deciding loads every master: one that does not answer
				// would hold this call, whose keys may live on another.
				go l.decideAside()
				break
			}
			err := l.decideOnce(ctx)
			if err == nil && l.fn.mode.Load() == modeFunction {
				return l.call(ctx, keys, args)
			}
		}
	}
	return l.evalSHA(ctx, keys, args)
}

// decideOnce runs decide with l.fn.deciding held, and unlocks it. After a
// failure calls use EVALSHA for decideRetry.
func (l *Limiter) decideOnce(ctx context.Context) error {
	defer l.fn.deciding.Unlock()
	err := l.decide(ctx)
	if err != nil {
		l.fn.retryAt.Store(time.Now().Add(decideRetry).UnixNano())
	}
	return err
}

// decideAside is decideOnce off the request path, for a Cluster.
func (l *Limiter) decideAside() {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.Timeout)
	defer cancel()
	_ = l.decideOnce(ctx)
}

// evalSHA runs the script with EVALSHA, or EVAL if Redis answers NOSCRIPT.
func (l *Limiter) evalSHA(ctx context.Context, keys []string, args []any) (any, error) {
	reply, err := l.sendOnce(ctx, scriptArgs("evalsha", evaluateScript.Hash(), keys, args))
	if replied(err, "NOSCRIPT") {
		return l.sendOnce(ctx, scriptArgs("eval", evaluateSource, keys, args))
	}
	return reply, err
}

// scriptArgs returns the command name, what (a function, a SHA or a
// script), the number of keys, the keys and args.
func scriptArgs(name, what string, keys []string, args []any) []any {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, name, what, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}

// onceCmd is a command a Cluster client must not send again after a
// dropped connection, which would charge its hits twice. Redirects (MOVED,
// ASK), which say Redis ran nothing, are still followed.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (onceCmd) NoRetry() bool { return true }

// A TRYAGAIN reply (a slot being migrated) says the script did not run:
// the call is sent again after a pause, a few times.
const (
	tryAgainPause = 5 * time.Millisecond
	tryAgainMax   = 5
)

// sendOnce sends cmd (see scriptArgs) and returns its reply. Only after
// TRYAGAIN is it sent again, while ctx allows.
func (l *Limiter) sendOnce(ctx context.Context, cmd []any) (any, error) {
	for try := 1; ; try++ {
		c := redis.NewCmd(ctx, cmd...)
		if n, _ := cmd[2].(int); n > 0 {
			// Where the keys start, for a Cluster client's routing.
			c.SetFirstKeyPos(3)
		}
		err := l.client.Process(ctx, onceCmd{c})
		if err == nil || try == tryAgainMax || !replied(err, "TRYAGAIN") {
			return c.Val(), err
		}
		t := time.NewTimer(tryAgainPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// decideRetry is how long after loading the library failed calls wait to
// try again.
const decideRetry = time.Second

// functions is a Limiter's state of Redis Functions.
type functions struct {
	mode     atomic.Int32
	deciding sync.Mutex   // held by the one call deciding the mode
	retryAt  atomic.Int64 // Unix ns before which calls do not try to decide
	log      *slog.Logger
}

// decide loads the library on every node (every master of a Cluster) and
// sets the mode: functions when a node has it, EVALSHA when Redis refuses
// FUNCTION, undecided, with the error, when no node answered.
func (l *Limiter) decide(ctx context.Context) error {
	if l.cluster != nil {
		outcomes, err := l.loadEach(ctx, l.opts.Timeout)
		if err != nil || l.fn.mode.Load() != modeUndecided {
			return err
		}
		errs := make([]error, len(outcomes))
		for i, o := range outcomes {
			errs[i] = fmt.Errorf("%s: %w", o.addr, o.err)
		}
		return errors.Join(errs...)
	}
	err := loadLibrary(ctx, l.client)
	if err == nil {
		l.useFunctions()
		return nil
	}
	if l.fallBack(err) {
		return nil
	}
	return err
}

// useFunctions switches an undecided Limiter to FCALL, and says so once.
func (l *Limiter) useFunctions() {
	if l.fn.mode.CompareAndSwap(modeUndecided, modeFunction) {
		l.fn.log.Info("the Lua code runs as a Redis function (FCALL), loaded once per node",
			"function", functionName)
	}
}

// fallBack switches the Limiter to EVALSHA for good if err is Redis
// refusing functions, and reports whether it is.
func (l *Limiter) fallBack(err error) bool {
	if !refusesFunctions(err) {
		return false
	}
	if l.fn.mode.Swap(modeScript) != modeScript {
		l.fn.log.Warn("Redis does not run functions for floodgate (before Redis 7, or an ACL denying FUNCTION or FCALL): the Lua code is sent with EVALSHA, which costs Redis more CPU per call",
			"err", err, "script_sha", evaluateScript.Hash())
	}
	return true
}

// loadOn loads the library on the node that holds keys: the client's, or
// the master of their slot on a Cluster.
func (l *Limiter) loadOn(ctx context.Context, keys []string) error {
	if l.cluster == nil || len(keys) == 0 {
		return loadLibrary(ctx, l.client)
	}
	c, err := l.cluster.MasterForKey(ctx, keys[0])
	if err != nil {
		return fmt.Errorf("find the master of %q: %w", keys[0], err)
	}
	return loadLibrary(ctx, c)
}

// loadLibrary runs FUNCTION LOAD of the library on c. Its name holds the
// hash of its code: one "already exists" is this one.
func loadLibrary(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, evaluateLibrary).Err()
	if err == nil || replied(err, "") && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	return fmt.Errorf("FUNCTION LOAD %s: %w", functionName, err)
}

// refusesFunctions reports whether err is Redis refusing FUNCTION or
// FCALL: an unknown command (before 7) or an ACL denying them, not the
// call's keys.
func refusesFunctions(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	if strings.HasPrefix(msg, "NOPERM") {
		// "...to run the 'fcall' command", "...'function|load'...".
		return strings.Contains(msg, "'fcall") || strings.Contains(msg, "'function")
	}
	return strings.Contains(msg, "unknown command") || strings.Contains(msg, "unknown subcommand")
}

// replied reports whether err is an error reply of Redis starting with
// prefix.
func replied(err error, prefix string) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), prefix)
}
