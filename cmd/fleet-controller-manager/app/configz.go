package app

import (
	"fmt"

	"k8s.io/component-base/configz"
	configv1alpha1 "k8s.io/kube-controller-manager/config/v1alpha1"
	kcmapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kcmconfig "k8s.io/kubernetes/cmd/kube-controller-manager/app/config"
	configv1alpha1conversion "k8s.io/kubernetes/pkg/controller/apis/config/v1alpha1"
)

// registerConfigz publishes the component configuration on /configz under
// KCM's name and in KCM's external form, as KCM's Run does, so tools that
// read a controller manager's effective settings read the fleet's alike.
func registerConfigz(c *kcmconfig.CompletedConfig) error {
	external := &configv1alpha1.KubeControllerManagerConfiguration{}
	if err := configv1alpha1conversion.Convert_config_KubeControllerManagerConfiguration_To_v1alpha1_KubeControllerManagerConfiguration(&c.ComponentConfig, external, nil); err != nil {
		return fmt.Errorf("converting the component config for /configz: %w", err)
	}
	external.SetGroupVersionKind(configv1alpha1.SchemeGroupVersion.WithKind("KubeControllerManagerConfiguration"))
	cfgz, err := configz.New(kcmapp.ConfigzName)
	if err != nil {
		return fmt.Errorf("registering /configz: %w", err)
	}
	if err := cfgz.Set(external); err != nil {
		return fmt.Errorf("setting /configz: %w", err)
	}
	return nil
}
