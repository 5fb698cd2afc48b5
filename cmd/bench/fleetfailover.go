package main

// -kill-master: the master holding the hottest bucket's counter is killed
// (SIGKILL) a quarter into a window of the limit, under the fleet, and its
// replica promoted (by the Cluster, or by the Sentinels). What the fleet
// admitted in that window beyond the limit is what the replica had not
// received when the master died, plus, through RLQS, what Envoys admitted
// while the reports could not be charged; the requests the failure policy
// answered meanwhile are counted apart; and every other window, and every
// bucket of the other masters, must hold its limit as before.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate/floodgate/internal/harness/redistest"
	"github.com/floodgate/floodgate/pkg/redislimit"
	"github.com/floodgate/floodgate/pkg/rules"
)

// failoverRun is a master's kill under the fleet.
type failoverRun struct {
	done       chan struct{}
	master     string
	onMaster   []bool // per bucket: its counter lived on the killed master
	at         time.Time
	killedAt   time.Time
	promotedAt time.Time
	err        error
}

// armFailover finds the master of the hottest bucket and kills it a
// quarter into the first window of the limit that starts after fr.killAt.
func (env *fleetEnv) armFailover(ctx context.Context, fr *fleetRun) (*failoverRun, error) {
	w := int64(env.o.Window)
	f := &failoverRun{done: make(chan struct{})}
	f.at = time.Unix(0, (fr.killAt.UnixNano()/w+1)*w).Add(env.o.Window / 4)
	if end := fr.killAt.Add(env.o.Duration - env.o.KillMaster); f.at.Add(2 * env.o.Window).After(end) {
		return nil, fmt.Errorf("-kill-master %v: the kill (a quarter into the next window) leaves no whole window after its own: lengthen -duration", env.o.KillMaster)
	}
	var err error
	if f.master, f.onMaster, err = env.locate(ctx, fleetDomain+fr.proto); err != nil {
		return nil, err
	}
	fr.killAt = f.at
	go func() {
		defer close(f.done)
		if sleepUntil(ctx, f.at) == nil {
			f.kill(env)
		}
	}()
	return f, nil
}

// locate returns the master holding bucket 0's counter of domain, and
// which buckets' counters live on it.
func (env *fleetEnv) locate(ctx context.Context, domain string) (string, []bool, error) {
	keys, err := env.counterKeys(domain)
	if err != nil {
		return "", nil, err
	}
	on := make([]bool, len(keys))
	if env.redis.sentinel != nil {
		m, err := env.redis.sentinel.Master()
		for b := range on {
			on[b] = true
		}
		return m, on, err
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: env.redis.cluster.Addrs})
	defer cc.Close()
	masters := make([]string, len(keys))
	for b, k := range keys {
		c, err := cc.MasterForKey(ctx, redislimit.Key("", k))
		if err != nil {
			return "", nil, err
		}
		masters[b] = c.Options().Addr
	}
	for b := range on {
		on[b] = masters[b] == masters[0]
	}
	return masters[0], on, nil
}

// counterKeys returns each bucket's counter key in domain, as floodgate
// builds it from the fleet's rules.
func (env *fleetEnv) counterKeys(domain string) ([]string, error) {
	files := map[string][]byte{}
	for _, p := range []string{protoRLS, protoRLQS} {
		b, err := os.ReadFile(filepath.Join(env.dir, "rules", p+".yaml"))
		if err != nil {
			return nil, err
		}
		files[p+".yaml"] = b
	}
	set, err := rules.Parse(files, rules.Options{})
	if err != nil {
		return nil, err
	}
	keys := make([]string, env.o.Buckets)
	var res rules.Resolution
	for b := range keys {
		d := []rules.Descriptor{{Entries: []rules.Entry{{Key: fleetKey, Value: "k" + fmt.Sprint(b)}}}}
		if err := set.Resolve(&res, domain, d); err != nil {
			return nil, err
		}
		keys[b] = res.Descriptors[0].Limits[0].Key
		res.Reset()
	}
	return keys, nil
}

// kill stops the master and waits for its replica to take over.
func (f *failoverRun) kill(env *fleetEnv) {
	node := env.redis.node(f.master)
	if node == nil {
		f.err = fmt.Errorf("no data node at %s", f.master)
		return
	}
	node.Stop()
	f.killedAt = time.Now()
	if env.redis.sentinel != nil {
		_, f.err = env.redis.sentinel.WaitFailover(f.master, time.Minute)
	} else {
		f.err = env.redis.cluster.WaitOK(time.Minute)
	}
	f.promotedAt = time.Now()
}

// node returns the data node at addr, or nil.
func (r *fleetRedis) node(addr string) *redistest.Server {
	for _, n := range r.nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// failoverFigures is what the kill cost.
type failoverFigures struct {
	Master  string `json:"master"`
	Buckets int    `json:"buckets_on_master"`
	// IntoWindowSec is how far into its window the master was killed;
	// PromotedMs how long until the replica served as master.
	IntoWindowSec float64 `json:"killed_into_window_s"`
	PromotedMs    float64 `json:"promoted_after_ms"`
	// FailedRequests were the killed master's buckets' requests the
	// failure policy answered (RLS), the last LastFailureMs after the
	// kill, PerSecond in each second after it; FailedElsewhere the other
	// masters' buckets'.
	FailedRequests  int64   `json:"failure_policy_answers"`
	LastFailureMs   float64 `json:"last_failure_policy_answer_ms"`
	PerSecond       []int64 `json:"failure_policy_answers_per_second"`
	FailedElsewhere int64   `json:"failure_policy_answers_elsewhere"`
	// KillWindow is what the killed master's buckets over the limit
	// admitted in the window of the kill, beyond the limit: summed, and
	// the most by one bucket; Later the most one of them admitted beyond
	// (or short of) the limit in the windows after.
	KillWindowExcess int64 `json:"kill_window_excess"`
	KillWindowWorst  int64 `json:"kill_window_worst_bucket_excess"`
	LaterExcess      int64 `json:"later_worst_excess"`
	LaterShortfall   int64 `json:"later_worst_shortfall"`
	// Elsewhere is the other masters' buckets over the limit in every
	// whole window: the most one admitted beyond the limit, and the most
	// one fell short of it.
	ElsewhereExcess    int64 `json:"elsewhere_worst_excess"`
	ElsewhereShortfall int64 `json:"elsewhere_worst_shortfall"`
	// Recovered is every over-limit bucket, in every whole window after
	// the failure policy's last answer: the most one admitted beyond the
	// limit or fell short of it; -1 without such a window.
	Recovered int64 `json:"recovered_worst_deviation"`
	// ByWindow is, per whole window from the first, what the over-limit
	// buckets admitted against the limit: [window's offset from the kill's
	// window, the killed master's buckets' admitted sum over their limits'
	// sum, the others'], in per mille.
	ByWindow [][3]int64 `json:"by_window_permille"`
	Err      string     `json:"error,omitempty"`
}

// figures computes what the kill cost over the run from from to to; nil
// without a kill.
func (f *failoverRun) figures(fr *fleetRun, o *fleetOptions, from, to time.Time) *failoverFigures {
	if f == nil {
		return nil
	}
	<-f.done
	ff := &failoverFigures{Master: f.master, Buckets: countTrue(f.onMaster)}
	if f.err != nil {
		ff.Err = f.err.Error()
	}
	if f.killedAt.IsZero() {
		return ff
	}
	ff.IntoWindowSec = float64(f.killedAt.UnixNano()%int64(o.Window)) / 1e9
	ff.PromotedMs = float64(f.promotedAt.Sub(f.killedAt)) / 1e6
	ff.FailedRequests, ff.LastFailureMs, ff.PerSecond = fr.counts.failuresAfter(f.killedAt, f.onMaster)
	others := make([]bool, len(f.onMaster))
	for b, on := range f.onMaster {
		others[b] = !on
	}
	ff.FailedElsewhere, _, _ = fr.counts.failuresAfter(f.killedAt, others)
	f.windowExcess(fr, o, ff, from, to)
	recovered := f.killedAt.Add(time.Duration(ff.LastFailureMs * float64(time.Millisecond)))
	if recovered.Before(f.promotedAt) {
		recovered = f.promotedAt
	}
	ff.Recovered = recoveredWorst(fr, o, recovered, to)
	return ff
}

// windowExcess fills the failover's window figures from the fleet's
// counts over the whole windows between from and to.
func (f *failoverRun) windowExcess(fr *fleetRun, o *fleetOptions, ff *failoverFigures, from, to time.Time) {
	kw := fr.counts.windowOf(f.killedAt)
	first, last := wholeWindows(o.Window, from, to)
	for w := first; w <= last; w++ {
		wc := fr.counts.windowCopy(w)
		if wc == nil {
			continue
		}
		ff.ByWindow = append(ff.ByWindow, f.windowShares(fr, o, wc, w-kw))
		for b := range o.Buckets {
			if fr.d.demandPerWindow(b, o.Envoys, o.Window) < overDemand*float64(o.Limit) {
				continue
			}
			d := wc.admitted[b] - int64(o.Limit)
			switch {
			case !f.onMaster[b]:
				ff.ElsewhereExcess = max(ff.ElsewhereExcess, d)
				ff.ElsewhereShortfall = max(ff.ElsewhereShortfall, -d)
			case w == kw:
				ff.KillWindowExcess += max(d, 0)
				ff.KillWindowWorst = max(ff.KillWindowWorst, d)
			case w > kw:
				ff.LaterExcess = max(ff.LaterExcess, d)
				ff.LaterShortfall = max(ff.LaterShortfall, -d)
			}
		}
	}
}

// recoveredWorst is the most an over-limit bucket's admissions strayed
// from the limit in the whole windows between from and to; -1 without
// one.
func recoveredWorst(fr *fleetRun, o *fleetOptions, from, to time.Time) int64 {
	worst := int64(-1)
	first, last := wholeWindows(o.Window, from, to)
	for w := first; w <= last; w++ {
		wc := fr.counts.windowCopy(w)
		for b := range o.Buckets {
			if wc == nil || fr.d.demandPerWindow(b, o.Envoys, o.Window) < overDemand*float64(o.Limit) {
				continue
			}
			d := wc.admitted[b] - int64(o.Limit)
			worst = max(worst, d, -d)
		}
	}
	return worst
}

// windowShares is one window's entry of ByWindow: what the over-limit
// buckets of the killed master, and of the others, admitted over their
// limits, per mille.
func (f *failoverRun) windowShares(fr *fleetRun, o *fleetOptions, wc *windowCounts, offset int64) [3]int64 {
	var admitted, limits [2]int64
	for b := range o.Buckets {
		if fr.d.demandPerWindow(b, o.Envoys, o.Window) < overDemand*float64(o.Limit) {
			continue
		}
		i := 1
		if f.onMaster[b] {
			i = 0
		}
		admitted[i] += wc.admitted[b]
		limits[i] += int64(o.Limit)
	}
	out := [3]int64{offset}
	for i := range admitted {
		if limits[i] > 0 {
			out[i+1] = 1000 * admitted[i] / limits[i]
		}
	}
	return out
}

func countTrue(v []bool) int {
	n := 0
	for _, b := range v {
		n += b2int(b)
	}
	return n
}
