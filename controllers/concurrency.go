package controllers

import (
	"reflect"
	"strings"

	kubectrlmgrconfig "k8s.io/kubernetes/pkg/controller/apis/config"
)

// pieceConcurrency returns config with every controller's worker count
// (the --concurrent-*-syncs flags, fields named Concurrent…Syncs) divided
// among partitions, at least one worker each. In KCM
// --concurrent-deployment-syncs=5 is five workers for the whole cluster; a
// partition piece serves 1/partitions of the namespaces, and a fleet of
// one runs every partition piece, so each gets its share. Without this a
// replica ran partitions × the configured workers: 30,000 goroutines and
// ~490 MB of RSS for a fleet of one at 64 partitions.
func pieceConcurrency(config kubectrlmgrconfig.KubeControllerManagerConfiguration, partitions int) kubectrlmgrconfig.KubeControllerManagerConfiguration {
	scaleConcurrency(reflect.ValueOf(&config).Elem(), int32(partitions))
	return config
}

func scaleConcurrency(v reflect.Value, partitions int32) {
	t := v.Type()
	for i := range v.NumField() {
		f, field := v.Field(i), t.Field(i)
		switch {
		case f.Kind() == reflect.Struct && field.IsExported():
			scaleConcurrency(f, partitions)
		case f.Kind() == reflect.Int32 && strings.Contains(field.Name, "Concurrent") && strings.HasSuffix(field.Name, "Syncs") && f.CanSet():
			if n := f.Int(); n > 0 {
				f.SetInt(int64(max(1, (int32(n)+partitions-1)/partitions)))
			}
		}
	}
}
