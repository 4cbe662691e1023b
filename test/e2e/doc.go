//go:build e2e

// Package e2e holds the end-to-end tests: each starts a real control plane
// from test/localcluster and drives built binaries as subprocesses. They need
// `make tools build` and run with `go test -tags e2e ./test/e2e/`.
package e2e
