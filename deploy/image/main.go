// Command image assembles fleet-controller-manager's container image from
// binaries already built, without a container daemon: one static binary per
// platform, a passwd and group naming the non-root user it runs as, and OCI
// labels. It writes an OCI image layout (a multi-platform index), the same
// layout as one tar (podman load, ctr import, docker load from Docker 25 on),
// and a Docker archive per platform (docker load of any version); with -push
// it sends the index to a registry instead of (and as well as) writing files.
//
// It is its own module so that go-containerregistry is a dependency of the
// build, not of the fleet. `make image` and `make push` drive it.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's user: nobody's uid in distroless images, and the one
// deploy/components/pod's securityContext names.
const (
	userID   = 65532
	userName = "nonroot"
	// entrypoint is where the binary sits: the manifests' command.
	entrypoint = "/fleet-controller-manager"
)

// binaries is -binary, repeated: platform=path.
type binaries map[string]string

func (b binaries) String() string { return fmt.Sprint(map[string]string(b)) }

func (b binaries) Set(value string) error {
	platform, path, ok := strings.Cut(value, "=")
	if !ok || !strings.Contains(platform, "/") {
		return fmt.Errorf("want os/arch=path, got %q", value)
	}
	b[platform] = path
	return nil
}

type options struct {
	binaries binaries
	out      string
	ref      string
	version  string
	revision string
	source   string
	created  string
	push     bool
}

func main() {
	opts := options{binaries: binaries{}}
	flag.Var(opts.binaries, "binary", "os/arch=path of a static fleet-controller-manager binary; repeat for each platform")
	flag.StringVar(&opts.out, "out", "", "folder to write the OCI layout and archives into")
	flag.StringVar(&opts.ref, "image", "", "the image's name and tag, e.g. registry.example.com/fleet-controller-manager:v0.1.0")
	flag.StringVar(&opts.version, "version", "", "org.opencontainers.image.version (git describe)")
	flag.StringVar(&opts.revision, "revision", "", "org.opencontainers.image.revision (the commit)")
	flag.StringVar(&opts.source, "source", "", "org.opencontainers.image.source")
	flag.StringVar(&opts.created, "created", "", "creation time in Unix seconds (the commit's time, so that a build is reproducible)")
	flag.BoolVar(&opts.push, "push", false, "push the index to -image's registry (credentials as docker login stores them)")
	flag.Parse()
	if err := run(opts); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(opts options) error {
	if len(opts.binaries) == 0 {
		return errors.New("no -binary given")
	}
	if opts.out == "" && !opts.push {
		return errors.New("neither -out nor -push given")
	}
	ref, err := name.NewTag(opts.ref)
	if err != nil {
		return fmt.Errorf("-image %q: %w", opts.ref, err)
	}
	created := time.Unix(0, 0).UTC()
	if opts.created != "" {
		secs, err := strconv.ParseInt(opts.created, 10, 64)
		if err != nil {
			return fmt.Errorf("-created %q: %w", opts.created, err)
		}
		created = time.Unix(secs, 0).UTC()
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "fleet-controller-manager",
		"org.opencontainers.image.version":  opts.version,
		"org.opencontainers.image.revision": opts.revision,
		"org.opencontainers.image.source":   opts.source,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
	}
	index := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	images := map[string]v1.Image{}
	// Sorted: the index lists the platforms in one order, so the same
	// binaries always give the same digest.
	for _, platform := range slices.Sorted(maps.Keys(opts.binaries)) {
		path := opts.binaries[platform]
		osName, arch, _ := strings.Cut(platform, "/")
		img, err := buildImage(osName, arch, path, labels, created)
		if err != nil {
			return fmt.Errorf("image for %s: %w", platform, err)
		}
		images[platform] = img
		index = mutate.AppendManifests(index, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: osName, Architecture: arch}},
		})
	}
	index = mutate.Annotations(index, labels).(v1.ImageIndex)
	if opts.out != "" {
		if err := write(opts.out, ref, index, images); err != nil {
			return err
		}
	}
	if opts.push {
		if err := remote.WriteIndex(ref, index, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		digest, _ := index.Digest()
		fmt.Printf("pushed %s@%s\n", ref, digest)
	}
	return nil
}

// buildImage is one platform's image: a layer with the user's files and a
// layer with the binary, run as the non-root user.
func buildImage(osName, arch, binary string, labels map[string]string, created time.Time) (v1.Image, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("reading the binary: %w", err)
	}
	base, err := layer(created, []file{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/passwd", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:/home/%s:/sbin/nologin\n", userName, userID, userID, userName, userName)},
		{name: "etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", userName, userID)},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/" + userName + "/", mode: 0o700, dir: true, uid: userID},
		// Go's os.TempDir, for anything that writes a scratch file.
		{name: "tmp/", mode: 0o1777, dir: true},
		// The default --flex-volume-plugin-dir, empty: the volume
		// controllers' plugin prober creates it when it is missing, which a
		// non-root user cannot, and logs an error at every start.
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/libexec/", mode: 0o755, dir: true},
		{name: "usr/libexec/kubernetes/", mode: 0o755, dir: true},
		{name: "usr/libexec/kubernetes/kubelet-plugins/", mode: 0o755, dir: true},
		{name: "usr/libexec/kubernetes/kubelet-plugins/volume/", mode: 0o755, dir: true},
		{name: "usr/libexec/kubernetes/kubelet-plugins/volume/exec/", mode: 0o755, dir: true},
	})
	if err != nil {
		return nil, err
	}
	app, err := layer(created, []file{{name: strings.TrimPrefix(entrypoint, "/"), mode: 0o755, data: bin}})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(mutate.MediaType(empty.Image, types.OCIManifestSchema1), base, app)
	if err != nil {
		return nil, err
	}
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	config, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	config = config.DeepCopy()
	config.OS, config.Architecture = osName, arch
	config.Created = v1.Time{Time: created}
	config.Config.Entrypoint = []string{entrypoint}
	config.Config.User = fmt.Sprintf("%d:%d", userID, userID)
	config.Config.WorkingDir = "/"
	config.Config.Labels = labels
	return mutate.ConfigFile(img, config)
}

type file struct {
	name string
	mode int64
	dir  bool
	uid  int
	data []byte
}

// layer is a gzip-compressed OCI layer holding files, every time set to
// created so that the same binaries give the same digests.
func layer(created time.Time, files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.uid, ModTime: created, Format: tar.FormatPAX}
		if f.dir {
			hdr.Typeflag = tar.TypeDir
		} else {
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// write puts the index in out as an OCI layout (oci/), the layout as one tar,
// and each platform's image as a Docker archive.
func write(out string, ref name.Tag, index v1.ImageIndex, images map[string]v1.Image) error {
	dir := filepath.Join(out, "oci")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	path, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := path.AppendIndex(index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          containerdName(ref),
	})); err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := tarDir(dir, filepath.Join(out, "fleet-controller-manager.oci.tar")); err != nil {
		return fmt.Errorf("archiving the OCI layout: %w", err)
	}
	for platform, img := range images {
		archive := filepath.Join(out, "fleet-controller-manager-"+strings.ReplaceAll(platform, "/", "-")+".docker.tar")
		if err := tarball.WriteToFile(archive, ref, img); err != nil {
			return fmt.Errorf("writing %s: %w", archive, err)
		}
	}
	digest, err := index.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: index %s in %s\n", ref, digest, out)
	return nil
}

// containerdName is the name ctr and crictl list the image under: Docker
// Hub's registry is docker.io to them (index.docker.io to
// go-containerregistry).
func containerdName(ref name.Tag) string {
	registry := ref.Context().RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	return registry + "/" + ref.Context().RepositoryStr() + ":" + ref.TagStr()
}

// tarDir writes the files under dir, relative to it, into the tar file out.
func tarDir(dir, out string) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if d.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		src, err := os.Open(path)
		if err != nil {
			return err
		}
		defer src.Close()
		_, err = io.Copy(tw, src)
		return err
	})
	if err != nil {
		f.Close()
		return err
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
