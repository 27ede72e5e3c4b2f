// Package remote is the API of another tenure node, as cluster mode uses
// it to forward requests: a route.Peer made of the generated Connect
// clients (protobuf bodies, over HTTP).
//
// Every request carries route.ForwardedHeader with this node's id, so the
// far node serves it from its own partitions and never forwards it again.
// Requests and answers are the API's own messages, so nothing is converted
// and nothing is lost: an answer, or an error with its code, message and
// details, is what the far node sent. A call that does not get an answer
// from a tenure node (refused, reset, a proxy's error page) fails with
// code unavailable and a message naming the node's address; one ended by
// its caller's context fails with canceled or deadline_exceeded.
package remote
