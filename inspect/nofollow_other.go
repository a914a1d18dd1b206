//go:build !unix

package inspect

const noFollow = 0
