// Package delivery owns the way messages leave paygate: merchants'
// endpoints and their signing secrets, deliveries and their attempts, and
// the signed HTTP sender with the dialer that refuses private addresses.
//
// Merchants choose the URLs we call, so every outgoing connection is
// treated as hostile: the address is checked after resolution, redirects
// are never followed, every read is bounded and every call has a deadline.
//
// This package must never write messages (package outbox does), and a slow
// or failing endpoint must never block ingest or the applying of events:
// delivery runs apart from both, on messages already committed.
package delivery
