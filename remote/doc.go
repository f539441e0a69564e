// Package remote lets processes of schedulers on different machines send
// each other messages, over NATS.
package remote
