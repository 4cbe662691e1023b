//go:build e2e

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/fleet-controller-manager/fleet-controller-manager/test/localcluster"
)

// podRunner runs a rendered pod template's one container the way a kubelet
// and a container runtime would, as far as one machine allows: the image's
// root with the pod's volumes written in as a kubelet writes them (owner,
// mode, fsGroup), the ServiceAccount token, CA and namespace where
// in-cluster clients look for them, the user from the securityContext or
// else the image, and the environment from the image, the container and
// the kubelet's service variables only. What differs, and why: pods have a
// network namespace each, and the replicas here share the machine's, so
// each binds its own loopback address (its pod IP) with --bind-address; and
// the service variables name the apiserver itself (no Service proxy here).
type podRunner struct {
	cluster   *localcluster.Cluster
	image     ociImage
	root      string
	spec      corev1.PodSpec
	container corev1.Container
	namespace string
}

// podVolumes is what the kubelet would fetch for the pod: each Secret's
// files, and the ServiceAccount's token and CA.
type podVolumes struct {
	secrets map[string]map[string][]byte
	token   []byte
	caCert  []byte
}

// newPodRunner extracts img into a new root and writes spec's volumes in.
func newPodRunner(t *testing.T, cluster *localcluster.Cluster, img ociImage, namespace string, spec corev1.PodSpec, volumes podVolumes) *podRunner {
	t.Helper()
	if len(spec.Containers) != 1 {
		t.Fatalf("the pod has %d containers; the runner runs one", len(spec.Containers))
	}
	r := &podRunner{cluster: cluster, image: img, root: t.TempDir(), spec: spec, container: spec.Containers[0], namespace: namespace}
	img.extract(t, r.root)
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		// The projected volume's default mode.
		r.writeVolume(t, "/var/run/secrets/kubernetes.io/serviceaccount", 0o644, map[string][]byte{
			"token": volumes.token, "ca.crt": volumes.caCert, "namespace": []byte(namespace),
		})
	}
	for _, mount := range r.container.VolumeMounts {
		var volume *corev1.Volume
		for i := range spec.Volumes {
			if spec.Volumes[i].Name == mount.Name {
				volume = &spec.Volumes[i]
			}
		}
		if volume == nil {
			t.Fatalf("volumeMount %s names no volume", mount.Name)
		}
		if volume.Secret == nil {
			t.Fatalf("volume %s: only Secret volumes are run here", volume.Name)
		}
		files, ok := volumes.secrets[volume.Secret.SecretName]
		if !ok {
			t.Fatalf("volume %s: no Secret %s given to the runner", volume.Name, volume.Secret.SecretName)
		}
		mode := os.FileMode(0o644)
		if volume.Secret.DefaultMode != nil {
			mode = os.FileMode(*volume.Secret.DefaultMode)
		}
		if len(volume.Secret.Items) > 0 {
			t.Fatalf("volume %s: Secret items are not run here", volume.Name)
		}
		r.writeVolume(t, mount.MountPath, mode, files)
	}
	return r
}

// writeVolume writes files into dir as the kubelet writes a Secret or
// projected volume: owned by root with mode, and with an fsGroup, owned by
// that group and readable by it (the kubelet's SetVolumeOwnership adds
// 0440 to a read-only volume's files).
func (r *podRunner) writeVolume(t *testing.T, dir string, mode os.FileMode, files map[string][]byte) {
	t.Helper()
	path := filepath.Join(r.root, dir)
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	gid := 0
	if sc := r.spec.SecurityContext; sc != nil && sc.FSGroup != nil {
		gid = int(*sc.FSGroup)
		mode |= 0o440
	}
	for name, data := range files {
		file := filepath.Join(path, name)
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(file, 0, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// user is the uid, gid and supplementary groups the runtime would run the
// container as.
func (r *podRunner) user(t *testing.T) (uid, gid uint32, groups []uint32) {
	t.Helper()
	imageUser, imageGroup, _ := strings.Cut(r.image.Config.User, ":")
	parse := func(what, s string) uint32 {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			t.Fatalf("image %s %q is not numeric: a runtime cannot check runAsNonRoot against a name", what, s)
		}
		return uint32(n)
	}
	uid, gid = parse("user", imageUser), 0
	if imageGroup != "" {
		gid = parse("group", imageGroup)
	}
	var nonRoot bool
	for _, sc := range []*corev1.SecurityContext{podLevel(r.spec.SecurityContext), r.container.SecurityContext} {
		if sc == nil {
			continue
		}
		if sc.RunAsUser != nil {
			uid = uint32(*sc.RunAsUser)
		}
		if sc.RunAsGroup != nil {
			gid = uint32(*sc.RunAsGroup)
		}
		if sc.RunAsNonRoot != nil {
			nonRoot = *sc.RunAsNonRoot
		}
	}
	if nonRoot && uid == 0 {
		t.Fatalf("runAsNonRoot, and the container would run as root: the kubelet refuses to start it")
	}
	if sc := r.spec.SecurityContext; sc != nil {
		if sc.FSGroup != nil {
			groups = append(groups, uint32(*sc.FSGroup))
		}
		for _, g := range sc.SupplementalGroups {
			groups = append(groups, uint32(g))
		}
	}
	return uid, gid, groups
}

// podLevel is the pod's securityContext's fields that a container's
// inherits.
func podLevel(sc *corev1.PodSecurityContext) *corev1.SecurityContext {
	if sc == nil {
		return nil
	}
	return &corev1.SecurityContext{RunAsUser: sc.RunAsUser, RunAsGroup: sc.RunAsGroup, RunAsNonRoot: sc.RunAsNonRoot}
}

// start runs the container as pod podName with the pod IP podIP.
func (r *podRunner) start(t *testing.T, podName, podIP, apiserverHost, apiserverPort string) *localcluster.Process {
	t.Helper()
	env := append([]string{"HOSTNAME=" + podName,
		"KUBERNETES_SERVICE_HOST=" + apiserverHost, "KUBERNETES_SERVICE_PORT=" + apiserverPort,
	}, r.image.Config.Env...)
	for _, e := range r.container.Env {
		value := e.Value
		if src := e.ValueFrom; src != nil {
			switch {
			case src.FieldRef != nil && src.FieldRef.FieldPath == "metadata.name":
				value = podName
			case src.FieldRef != nil && src.FieldRef.FieldPath == "metadata.namespace":
				value = r.namespace
			default:
				t.Fatalf("env %s: only metadata.name and metadata.namespace are run here", e.Name)
			}
		}
		env = append(env, e.Name+"="+value)
	}
	command, args := r.image.Config.Entrypoint, r.image.Config.Cmd
	if len(r.container.Command) > 0 {
		command, args = r.container.Command, nil
	}
	if len(r.container.Args) > 0 {
		args = r.container.Args
	}
	argv := append(append(append([]string{}, command...), args...), "--bind-address="+podIP)
	uid, gid, groups := r.user(t)
	p, err := r.cluster.StartContainer(podName, localcluster.Container{Root: r.root, UID: uid, GID: gid, Groups: groups, Env: env}, argv)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// run runs the image's entrypoint with args to its end (--version, --help),
// as the container's user, and returns what it printed.
func (r *podRunner) run(ctx context.Context, t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	uid, gid, groups := r.user(t)
	p, err := r.cluster.StartContainer(name, localcluster.Container{Root: r.root, UID: uid, GID: gid, Groups: groups},
		append(append([]string{}, r.image.Config.Entrypoint...), args...))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		t.Fatalf("%s did not end", name)
	}
	out, _ := os.ReadFile(p.LogPath)
	_, err = p.Exited()
	return string(out), err
}

// containerPort resolves a probe's or Service's target port (a number or a
// container port's name).
func (r *podRunner) containerPort(t *testing.T, port intstr.IntOrString) int {
	t.Helper()
	if port.Type == intstr.Int {
		return port.IntValue()
	}
	for _, p := range r.container.Ports {
		if p.Name == port.StrVal {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("no container port named %q", port.StrVal)
	return 0
}

// probe runs an HTTP probe as the kubelet does (no credentials, no
// certificate check, success on 200-399) against the pod at podIP.
func (r *podRunner) probe(t *testing.T, probe *corev1.Probe, podIP string) error {
	t.Helper()
	if probe == nil || probe.HTTPGet == nil {
		t.Fatal("the container has no HTTP probe here")
	}
	get := probe.HTTPGet
	scheme := strings.ToLower(string(get.Scheme))
	if scheme == "" {
		scheme = "http"
	}
	url := fmt.Sprintf("%s://%s%s", scheme, net.JoinHostPort(podIP, strconv.Itoa(r.containerPort(t, get.Port))), get.Path)
	client := &http.Client{Timeout: time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("%s: HTTP %d", url, resp.StatusCode)
	}
	return nil
}
