// Package ociimage assembles airlock's container image without a registry or
// a container engine: the Containerfile's run-time files, taken from the
// host's Debian packages (spec.go names them, a test keeps the Containerfile
// in step), plus the binaries `make build` wrote, as a root filesystem
// directory (the Containerfile's own assembly step) or an OCI image layout
// (`make image`, and the e2e test that runs the image under runc). Its
// root test also builds the Containerfile itself with buildah, offline, and
// checks the result holds the same files.
//
// Entry points: Assemble, then (*Tree).WriteDir or (*Tree).WriteLayout.
//
// test/ociimage must never import: any other airlock package.
package ociimage
