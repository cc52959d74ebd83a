// The pod sandbox's infra process for the real node (scripts/real-node): it holds the pod's
// namespaces open, reaps orphaned children, and exits on SIGTERM or SIGINT. Built statically
// (CGO_ENABLED=0) into a FROM-scratch image, so no registry's pause image is needed.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		// Processes re-parented to pid 1 of the pod would otherwise stay zombies.
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
