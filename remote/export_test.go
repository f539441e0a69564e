package remote

// SetInboundHook makes n call f before it takes each batch; nil removes
// it.
func SetInboundHook(n *Node, f func()) {
	if f == nil {
		n.inboundHook.Store(nil)
		return
	}
	n.inboundHook.Store(&f)
}
