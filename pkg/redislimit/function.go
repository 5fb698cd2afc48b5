package redislimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a Limiter runs the Lua code, decided once per Limiter (see
// Limiter.call).
const (
	modeUndecided int32 = iota // no FUNCTION LOAD has answered yet
	modeFunction               // FCALL of the library evaluateLibrary
	modeScript                 // EVALSHA: Redis has no FUNCTION, or the user may not use it
)

// call runs evaluate with keys and args and returns its reply, an error
// for a Redis error or a failure.
//
// With Redis Functions (Redis 7) the library is loaded once per node and
// each call is an FCALL, which runs only evaluate: the script sent by
// EVALSHA instead runs all the definitions of the Lua files again at every
// call, about 10 µs of Redis CPU (a quarter of a call of one request; see
// docs/benchmarks.md). The first
// call decides, by loading the library, whether Redis offers functions
// (on a Cluster, where that takes every master, off its path); until one
// has, calls use EVALSHA, which runs the same code. A Redis
// without the FUNCTION command (before 7) or whose ACL denies FUNCTION
// LOAD or FCALL keeps EVALSHA for the Limiter's life, and the logger says
// so once. A node that lost the library (a restart without persistence,
// FUNCTION FLUSH, a failover to a node that never had it, a Cluster node
// added later) answers "Function not found": the library is loaded there
// and the call sent again, once, as EVALSHA's NOSCRIPT is answered. Such a
// call ran nothing, so sending it again cannot count a hit twice.
//
// Every call is sent at most once after it may have reached Redis (see
// sendOnce): only replies that say Redis ran nothing lead to sending it
// again.
func (l *Limiter) call(ctx context.Context, keys []string, args []any) (any, error) {
	switch l.fn.mode.Load() {
	case modeFunction:
		reply, err := l.sendOnce(ctx, fcallArgs(keys, args))
		switch {
		case err == nil || !isRedisError(err):
			return reply, err
		case strings.HasPrefix(err.Error(), "ERR Function not found"):
			if err := l.loadOn(ctx, keys); err != nil {
				if !l.fallBack(err) {
					return nil, err
				}
				break
			}
			return l.sendOnce(ctx, fcallArgs(keys, args))
		case l.fallBack(err):
			// FCALL refused (ACL): EVALSHA from now on, this call first.
		default:
			return reply, err
		}
	case modeUndecided:
		if time.Now().UnixNano() >= l.fn.retryAt.Load() && l.fn.deciding.TryLock() {
			if l.cluster != nil {
				// A Cluster decides on every master: one that does not
				// answer would hold this call, whose keys may live on
				// another, for its whole deadline, and count the miss
				// against that other master's breaker.
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

// decideOnce runs decide with l.fn.deciding held (and unlocks it): after
// a failure, for want of Redis, calls use EVALSHA for decideRetry rather
// than each sending the library to every node.
func (l *Limiter) decideOnce(ctx context.Context) error {
	defer l.fn.deciding.Unlock()
	err := l.decide(ctx)
	if err != nil {
		l.fn.retryAt.Store(time.Now().Add(decideRetry).UnixNano())
	}
	return err
}

// decideAside is decideOnce off the request path, for a Cluster: the
// slot map it may have to fetch gets Options.Timeout, each master's load
// the same (loadEach), and calls meanwhile use EVALSHA.
func (l *Limiter) decideAside() {
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.Timeout)
	defer cancel()
	_ = l.decideOnce(ctx)
}

// evalSHA runs the script with EVALSHA, and with EVAL if Redis answers
// NOSCRIPT (it ran nothing then), which caches the script again.
func (l *Limiter) evalSHA(ctx context.Context, keys []string, args []any) (any, error) {
	reply, err := l.sendOnce(ctx, scriptArgs("evalsha", evaluateScript.Hash(), keys, args))
	if err != nil && isRedisError(err) && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		return l.sendOnce(ctx, scriptArgs("eval", evaluateSource, keys, args))
	}
	return reply, err
}

// fcallArgs returns the command FCALL of the function with keys and args.
func fcallArgs(keys []string, args []any) []any {
	return scriptArgs("fcall", functionName, keys, args)
}

// scriptArgs returns the command name, then what (a function name, a SHA
// or a script), the number of keys, the keys and args.
func scriptArgs(name, what string, keys []string, args []any) []any {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, name, what, len(keys))
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	return append(cmd, args...)
}

// onceCmd is a command go-redis must not send again once it may have
// reached Redis: its retries after a lost connection or a timeout would run
// a script twice, charging its hits (or refunding them) twice. The
// redirects of a Cluster (MOVED, ASK), which Redis answers without running
// anything, are still followed.
type onceCmd struct{ *redis.Cmd }

// NoRetry tells go-redis not to retry the command.
func (onceCmd) NoRetry() bool { return true }

// Redis answers these errors to a script call without running it, so the
// call may be sent again after a pause: a slot being migrated whose keys
// are split between two nodes (TRYAGAIN).
const (
	tryAgainPause = 5 * time.Millisecond
	tryAgainMax   = 5
)

// sendOnce sends the command cmd (a script call, see scriptArgs) and returns its reply.
// It is sent at most once after it may have reached Redis, on every
// topology: single nodes and Sentinel clients have go-redis's retries off
// (NewClient), and a Cluster client's own loop, which re-sends after a
// dropped connection whatever MaxRetries says, is told not to (onceCmd).
// A TRYAGAIN reply, which says the script did not run, is sent again a few
// times while ctx allows.
func (l *Limiter) sendOnce(ctx context.Context, cmd []any) (any, error) {
	for try := 1; ; try++ {
		c := redis.NewCmd(ctx, cmd...)
		if n, _ := cmd[2].(int); n > 0 {
			// Where the keys start, for a Cluster client's routing.
			c.SetFirstKeyPos(3)
		}
		err := l.client.Process(ctx, onceCmd{c})
		if err == nil || try == tryAgainMax || !isRedisError(err) || !strings.HasPrefix(err.Error(), "TRYAGAIN") {
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

// decideRetry is how long calls wait, after loading the library failed for
// want of Redis, before one of them tries again.
const decideRetry = time.Second

// functions is a Limiter's state of Redis Functions.
type functions struct {
	mode     atomic.Int32
	deciding sync.Mutex   // held by the one call deciding the mode
	retryAt  atomic.Int64 // Unix ns before which calls do not try to decide
	log      *slog.Logger
}

// decide loads the library on every node (every master of a Cluster) and
// sets the mode from the outcome: functions when a node has it, EVALSHA
// when Redis refuses FUNCTION. Otherwise, when no node could be reached,
// the mode stays undecided, for the next call to try again, and the error
// is returned.
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

// fallBack switches the Limiter to EVALSHA for good if err says that
// Redis refuses functions, and reports whether it did (or had already).
func (l *Limiter) fallBack(err error) bool {
	if !refusesFunctions(err) {
		return false
	}
	if l.fn.mode.Swap(modeScript) != modeScript {
		l.fn.log.Warn("Redis does not run functions for floodgate (before Redis 7, or an ACL denying FUNCTION or FCALL): the Lua code is sent with EVALSHA, which costs Redis more CPU per call",
			"err", err, "script_sha", ScriptSHA())
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

// loadLibrary runs FUNCTION LOAD of the library on c. The library's name
// holds the hash of its code, so a library of that name already loaded is
// this one: Redis refuses to load it again ("already exists") before
// compiling anything, which makes loading it again cheap.
func loadLibrary(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, evaluateLibrary).Err()
	if err != nil && isRedisError(err) && strings.Contains(err.Error(), "already exists") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("FUNCTION LOAD %s: %w", functionName, err)
	}
	return nil
}

// refusesFunctions reports whether err is Redis refusing FUNCTION or
// FCALL: an unknown command (Redis before 7) or a permission to run them
// denied by ACL. A NOPERM for the call's keys is not one: EVALSHA would
// be refused the same keys, and the keys the user may touch keep FCALL.
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

// isRedisError reports whether err is an error reply of Redis, rather than
// a failure to reach it.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
