// Command pause holds a pod sandbox's namespaces open until it is told to stop, as the
// Kubernetes pause image does: no registry can be reached here, so the node stage builds its own.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	// As PID 1 of a shared PID namespace it would also reap orphans; SIGCHLD is taken and the
	// children waited for so that none is left a zombie.
	child := make(chan os.Signal, 16)
	signal.Notify(child, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			os.Exit(0)
		case <-child:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
