package member

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/cluster/registry"
	"github.com/tenurehq/tenure/internal/route"
	"github.com/tenurehq/tenure/internal/tlsfiles"
)

// Probing the other nodes (docs/design/cluster.md, "Which nodes get partitions";
// package reach): every ProbeInterval this node calls every other active
// node at its advertised address as it would forward a request to it, and
// records what it found. The coordinator decides from every node's
// verdicts which nodes may be given partitions.

// probeFailuresToCount is how many probes in a row must fail for a reason
// that may pass (a timeout, a refused or reset connection, a 5xx) before
// the verdict becomes "unreachable": a node busy for a moment keeps its
// partitions. A failure that cannot pass by itself — the far node's
// certificate is not trusted or not valid, it refuses ours or the
// cluster's signature, it is another node or not a tenure node of this
// version — counts at once.
const probeFailuresToCount = 3

// probeMaxBody caps what a probe reads of an answer: a node id.
const probeMaxBody = 1024

// probeConcurrency caps the probes of one round under way at once.
const probeConcurrency = 32

// peerProbe is what this node remembers of its probes of one node.
type peerProbe struct {
	verdict  *bool  // the verdict recorded last; nil before the first
	failures int    // probes failed in a row, for a reason that may pass
	logged   string // the last state logged for it
}

// next is the verdict on node target after a probe that found detail, or
// failed with err (definite: for a reason that cannot pass by itself), and
// whether there is one to record: a failure that may pass counts only at
// the probeFailuresToCount-th in a row; before that the verdict before it
// stands, and with none before it there is nothing to say yet.
func (st *peerProbe) next(target, detail string, definite bool, err error) (registry.Verdict, bool) {
	v := registry.Verdict{Target: target, OK: err == nil, Detail: detail}
	switch {
	case err == nil:
		st.failures = 0
	case definite:
		st.failures = probeFailuresToCount
		v.Detail = err.Error()
	default:
		st.failures++
		v.Detail = err.Error()
		if st.failures < probeFailuresToCount {
			if st.verdict == nil {
				return registry.Verdict{}, false
			}
			v.OK = *st.verdict
			v.Detail = fmt.Sprintf("%s (failed %d of the %d probes in a row that make it unreachable)", err, st.failures, probeFailuresToCount)
		}
	}
	ok := v.OK
	st.verdict = &ok
	return v, true
}

// prober is the probe loop's state; only that loop uses it.
type prober struct {
	peers map[string]*peerProbe
	// selfLogged and selfLoggedAt are what the loop last logged of this
	// node's own eligibility, and when.
	selfLogged   string
	selfLoggedAt time.Time
	started      time.Time
}

// NodeID is this node's --node-id (route.NodeIdentity: the answer to
// another node's probe).
func (m *Member) NodeID() string { return m.cfg.NodeID }

// Eligible reports whether the coordinator has decided that the other
// nodes reach this node, so that it may be given partitions (as of the
// last probe round).
func (m *Member) Eligible() bool { return m.eligible.Load() }

// UnreachablePeers is the number of active nodes this node's probes find
// unreachable now.
func (m *Member) UnreachablePeers() int { return int(m.unreachable.Load()) }

func (m *Member) probeLoop() {
	defer m.wg.Done()
	p := &prober{peers: make(map[string]*peerProbe), started: m.cfg.Clock.Now()}
	for {
		m.probeRound(m.ctx, p)
		if !m.sleep(m.cfg.ProbeInterval) {
			return
		}
	}
}

// probeRound probes every other active node once, at once, records the
// verdicts and logs this node's own eligibility.
func (m *Member) probeRound(ctx context.Context, p *prober) {
	nodes, err := m.reg.List(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.lg.Warn("probing the other nodes: reading the node table failed", slog.Any("err", err))
		}
		return
	}
	var targets []registry.Node
	for _, n := range nodes {
		if n.Active && n.ID != m.cfg.NodeID {
			targets = append(targets, n)
		}
	}
	type outcome struct {
		detail   string
		definite bool
		err      error
	}
	outcomes := make([]outcome, len(targets))
	var wg sync.WaitGroup
	slots := make(chan struct{}, probeConcurrency)
	for i, n := range targets {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			o := &outcomes[i]
			o.detail, o.definite, o.err = m.probe(ctx, n)
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	var verdicts []registry.Verdict
	unreachable := 0
	seen := make(map[string]bool, len(targets))
	for i, n := range targets {
		seen[n.ID] = true
		st := p.peers[n.ID]
		if st == nil {
			st = &peerProbe{}
			p.peers[n.ID] = st
		}
		o := outcomes[i]
		v, record := st.next(n.ID, o.detail, o.definite, o.err)
		if !record {
			continue
		}
		if !v.OK {
			unreachable++
		}
		verdicts = append(verdicts, v)
		m.logPeer(st, n, v)
	}
	for id := range p.peers {
		if !seen[id] {
			delete(p.peers, id)
		}
	}
	m.unreachable.Store(int64(unreachable))
	if err := m.reg.RecordProbes(ctx, m.cfg.NodeID, verdicts); err != nil && ctx.Err() == nil {
		m.lg.Warn("recording the probes of the other nodes failed", slog.Any("err", err))
	}
	m.checkEligible(ctx, p)
}

// logPeer logs a change of this node's verdict on node n.
func (m *Member) logPeer(st *peerProbe, n registry.Node, v registry.Verdict) {
	state := "reached"
	if !v.OK {
		state = "unreachable"
	}
	if st.logged == state {
		return
	}
	first := st.logged == ""
	st.logged = state
	switch {
	case !v.OK:
		m.lg.Warn("cannot reach another node as a forwarded request would: it gets no partitions unless the other nodes reach it",
			slog.String("peer", n.ID), slog.String("addr", n.AdvertiseAddr), slog.String("err", v.Detail))
	case !first:
		m.lg.Info("reaches another node again", slog.String("peer", n.ID), slog.String("addr", n.AdvertiseAddr))
	}
}

// probe calls node n's route.NodeProbePath as a forwarded request would
// reach it — the same scheme, dialer and TLS configuration, on a new
// connection, signed with the cluster secret — and checks that it answers
// with n's id. It returns how n answered, or why it could not be reached
// and whether that cannot pass by itself (definite).
func (m *Member) probe(ctx context.Context, n registry.Node) (detail string, definite bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.ProbeTimeout)
	defer cancel()
	url := m.scheme() + n.AdvertiseAddr + route.NodeProbePath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", true, fmt.Errorf("node %s advertises %q, which is no address: %w", n.ID, n.AdvertiseAddr, err)
	}
	m.keys.Sign(req.Header, route.ForwardedHeader, m.cfg.NodeID, route.NodeProbePath, "")
	resp, err := m.probeClient.Do(req)
	if err != nil {
		return "", definiteTransport(err), err // a *url.Error: it names the method and the URL
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeMaxBody))
	answer := strings.TrimSpace(string(body))
	switch {
	case resp.StatusCode == http.StatusOK && answer == n.ID:
		proto := resp.Proto
		if resp.TLS != nil {
			proto += " over TLS"
		}
		return fmt.Sprintf("%s answered as %s (%s)", url, n.ID, proto), false, nil
	case resp.StatusCode == http.StatusOK:
		return "", true, fmt.Errorf("%s answered as node %q, not %q: the address reaches another node (check --advertise)", url, firstLine(answer), n.ID)
	case resp.StatusCode == http.StatusNotFound:
		return "", true, fmt.Errorf("%s answered 404: not a tenure node of this version (an older tenure, or another server at that address)", url)
	case resp.StatusCode >= 500:
		return "", false, fmt.Errorf("%s answered %s: %s", url, resp.Status, firstLine(answer))
	default:
		return "", true, fmt.Errorf("%s refused the probe: %s: %s", url, resp.Status, firstLine(answer))
	}
}

// definiteTransport reports whether a probe's transport error cannot pass
// by itself: the TLS handshake failed on a certificate (the far node's not
// trusted, not valid or not for its address; ours refused), or the far
// end does not speak what this node speaks (TLS or not).
func definiteTransport(err error) bool {
	var recHeader tls.RecordHeaderError
	if tlsfiles.HandshakeRefused(err) || errors.As(err, &recHeader) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "server gave HTTP response to HTTPS client") || strings.Contains(msg, "malformed HTTP response")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// scheme is how this node calls the others.
func (m *Member) scheme() string {
	if m.cfg.PeerDialTLS != nil {
		return "https://"
	}
	return "http://"
}

// checkEligible reads this node's eligibility and logs it: at once when
// it changes, and again every minute while the node gets no partitions
// because the others cannot reach it.
func (m *Member) checkEligible(ctx context.Context, p *prober) {
	v, err := readEligibility(ctx, m.reg, m.cfg.reportTTL(), m.cfg.NodeID)
	if err != nil {
		if ctx.Err() == nil {
			m.lg.Warn("reading this node's eligibility for partitions failed", slog.Any("err", err))
		}
		return
	}
	st := v.status()
	self := st.Nodes[m.cfg.NodeID]
	m.eligible.Store(self.Eligible)
	now := m.cfg.Clock.Now()
	var state string
	var log func(string, ...any)
	msg := ""
	switch {
	case self.Eligible:
		state, log, msg = "eligible", m.lg.Info, "eligible for partitions: the other nodes reach this node"
	case st.Fallback:
		state, log, msg = "fallback", m.lg.Warn, "no active node is verified by the others yet: partitions go to every active node, this one too"
	case self.Refused || now.Sub(p.started) > 5*m.cfg.ProbeInterval+m.cfg.ProbeTimeout:
		state, log = "refused", m.lg.Error
		msg = "THIS NODE GETS NO PARTITIONS: the other nodes cannot reach it as they forward requests. " +
			"Check that its certificate (--tls-cert) is issued by the CA the other nodes trust (their --tls-peer-ca, or --tls-client-ca), " +
			"is valid now and names the host of its --advertise; that it trusts theirs; and that --advertise reaches it from them"
	default:
		state, log, msg = "waiting", m.lg.Info, "waiting for the other nodes to verify this node before it gets partitions"
	}
	if state == p.selfLogged && (state != "refused" || now.Sub(p.selfLoggedAt) < time.Minute) {
		return
	}
	p.selfLogged, p.selfLoggedAt = state, now
	log(msg, slog.String("why", self.Why))
}
