// Package wsframe follows RFC 6455 websocket frame boundaries in a byte stream
// fed in arbitrary pieces and hands back each frame's header and its unmasked
// payload. It is what the gateway's content inspection and the secrets
// injector's placeholder check read a websocket with; it never buffers a
// payload, only a header being gathered (at most 14 bytes).
//
// wsframe must never import: any other airlock package.
package wsframe
