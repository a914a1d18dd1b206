// Package sibling opens a companion binary that lies beside the running
// executable (airlock-init beside the executor, airlock-core beside the
// airlock front) and checks that it is one of ours before anyone executes
// it: a regular, executable file owned by root or this user that no one else
// may write, from the same build as this process. The caller executes the
// open file (Exe), never the path again, so replacing the file on disk after
// the check changes nothing.
//
// Entry points: Open, Exe.
//
// sibling must never import: any other airlock package.
package sibling
