package remote

import (
	"errors"
	"testing"
)

// TestStatsCountsAPeerForgottenMeanwhile: the link totals of Stats count
// a peer once whether it is remembered or forgotten (its counts retired)
// while Stats reads them. Every peer here has sent one frame; the oldest
// down peer is forgotten in the middle of a snapshot, when the next one
// goes down, and Sent still counts every peer.
func TestStatsCountsAPeerForgottenMeanwhile(t *testing.T) {
	const peers = maxTombstones + 1
	n := &Node{byName: map[string]*peer{}, notifyCh: make(chan struct{})}
	all := map[uint32]*peer{}
	for num := uint32(1); num <= peers; num++ {
		p := newPeer(n, num, "", 0)
		p.link.state.Store(linkOpen)
		p.link.counts.frames = 1
		all[num] = p
	}
	n.peers.Store(&all)
	gone := errors.New("declared down by the test")
	for num := uint32(1); num < peers; num++ {
		n.declareDown(all[num], gone, false)
	}
	if got := n.Stats().Sent; got != peers {
		t.Fatalf("Sent is %d before any peer is forgotten, not %d", got, peers)
	}

	last := all[peers]
	forget := func() { n.declareDown(last, gone, false) } // forgets peer 1
	n.statsHook.Store(&forget)
	st := n.Stats()
	n.statsHook.Store(nil)
	if n.peer(1) != nil {
		t.Fatal("peer 1 was not forgotten")
	}
	if st.Sent != peers {
		t.Errorf("Sent is %d while peer 1 was forgotten, not %d", st.Sent, peers)
	}
	if got := n.Stats().Sent; got != peers {
		t.Errorf("Sent is %d after, not %d", got, peers)
	}
}
