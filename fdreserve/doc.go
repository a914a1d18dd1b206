// Package fdreserve keeps a listener failing closed at the process's
// descriptor limit. A Reserve holds one spare descriptor; when Accept fails
// for want of one (EMFILE, ENFILE) its Listener lets the spare go, accepts
// the waiting connection, closes it at once (the client sees its connection
// refused, and nothing of it reaches the server) and takes the spare back,
// then backs off before accepting again. Without it a listener at the limit
// leaves the connection in the backlog, and a server that retries temporary
// errors at once (miekg/dns) spins.
//
// Entry points: New, (*Reserve).Listener, (*Reserve).Refused.
//
// fdreserve must never import: any other airlock package.
package fdreserve
