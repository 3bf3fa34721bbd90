package hubmanager

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

func clientcmdConfig(path string) (*rest.Config, error) {
	return clientcmd.BuildConfigFromFlags("", path)
}
