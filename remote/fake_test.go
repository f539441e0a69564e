package remote_test

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/procsched/scheduler/remote"
)

// tFake is a node of cluster "test" played by hand over a raw NATS
// connection, to send a real node what a broken or hostile peer might,
// and to see exactly what the real node publishes.
type tFake struct {
	t    testing.TB
	num  uint32
	nc   *nats.Conn
	all  string         // the cluster's control subject
	ctl  chan *nats.Msg // what arrives on the fake's control subject
	data chan *nats.Msg // what arrives on the fake's data subject
}

// tFakePeer connects a fake node numbered num and subscribes to its
// subjects; the end of the test disconnects it.
func tFakePeer(t testing.TB, url string, num uint32) *tFake {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	f := &tFake{t: t, num: num, nc: nc, ctl: make(chan *nats.Msg, 64), data: make(chan *nats.Msg, 64)}
	var ctl, data string
	f.all, ctl, data = remote.Subjects("test", num)
	for subj, ch := range map[string]chan *nats.Msg{ctl: f.ctl, data: f.data} {
		_, err := nc.ChanSubscribe(subj, ch)
		require.NoError(t, err)
	}
	require.NoError(t, nc.Flush())
	return f
}

// publish publishes b on subj.
func (f *tFake) publish(subj string, b []byte) {
	f.t.Helper()
	require.NoError(f.t, f.nc.Publish(subj, b))
}

// tFakeUp starts a fake peer numbered after a, has it say hello (and
// ack a's), and waits until a has it up. Test goroutine only.
func tFakeUp(t testing.TB, url string, a *tNode) (f *tFake, fake uint32) {
	t.Helper()
	fake = a.Node.Node() + 1
	f = tFakePeer(t, url, fake)
	f.hello(a, true)
	tRecv(t, a.Up, "the fake to be up")
	return f, fake
}

// hello says hello to every node and waits for n's ack: n has registered
// the fake, but does not publish to it until the fake acks (ackBack).
func (f *tFake) hello(n *tNode, ackBack bool) {
	f.t.Helper()
	f.publish(f.all, remote.EncodeHello(f.num, "fake", false, false, nil))
	for m := range f.ctl {
		if remote.IsAck(m.Data, n.Node.Node()) {
			break
		}
	}
	if ackBack {
		f.ack(n)
	}
}

// ack tells n that the fake knows it: n's link to the fake opens.
func (f *tFake) ack(n *tNode) {
	_, ctl, _ := remote.Subjects("test", n.Node.Node())
	f.publish(ctl, remote.EncodeHello(f.num, "fake", true, false, n.Node))
}

// bye says goodbye, so that n need not wait for the fake's grants when
// it closes.
func (f *tFake) bye(n *tNode) {
	f.t.Helper()
	f.publish(f.all, remote.EncodeBye(f.num))
	tRecv(f.t, n.Down, "the fake node to leave")
}
