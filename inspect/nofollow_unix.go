//go:build unix

package inspect

import "syscall"

const noFollow = syscall.O_NOFOLLOW
