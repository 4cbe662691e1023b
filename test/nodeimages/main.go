// Command nodeimages writes the images the real node's pods run as OCI
// archives that `ctr images import` loads, under the names upstream's
// tests give them (k8s.io/kubernetes/test/utils/image), so that neither the
// kubelet nor a test ever pulls from a registry: the sandbox image (pause,
// compiled from upstream's pause.c), agnhost (built from the tools module)
// busybox (Debian's static busybox with a link per applet), and
// kube-controller-manager as kubeadm's static pod names it (the tools'
// build with the C library it links, for the migration from a static-pod
// KCM).
//
// Each image is one uncompressed layer and a config; the layout is small
// enough to write with the standard library, which keeps the image tool's
// registry client out of the test module.
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"k8s.io/klog/v2"
)

// The names upstream's e2e framework asks for (test/utils/image/manifest.go
// at the tools' Kubernetes version) and the kubelet's sandbox image.
const (
	PauseImage   = "registry.k8s.io/pause:3.10.2"
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
	// AgnhostPrevImage is the "previous" agnhost upstream's rollout tests
	// update from: the same binary under its name, so that an update
	// changes the image.
	AgnhostPrevImage = "registry.k8s.io/e2e-test-images/agnhost:2.55"
	BusyboxImage     = "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
	// KubeControllerManagerImage is kubeadm's, at the tools' version.
	KubeControllerManagerImage = "registry.k8s.io/kube-controller-manager:"
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// imageFile is one entry of an image's only layer.
type imageFile struct {
	name string // path inside the image, without the leading slash
	mode int64
	data []byte
	link string // a symbolic link's target, when set
	dir  bool
}

// image is one archive to write.
type image struct {
	ref        string
	files      []imageFile
	entrypoint []string
	cmd        []string
}

func main() {
	out := flag.String("out", "", "folder to write <name>.tar into")
	pause := flag.String("pause", "", "a static pause binary")
	agnhost := flag.String("agnhost", "", "a static agnhost binary")
	busybox := flag.String("busybox", "", "a static busybox binary")
	kcm := flag.String("kube-controller-manager", "", "kube-controller-manager, linked against the C library")
	porter := flag.String("agnhost-porter", "", "agnhost's porter folder (its localhost.crt and .key)")
	kubeVersion := flag.String("kube-version", "", "kube-controller-manager's version, its image's tag")
	flag.Parse()
	if err := run(*out, *pause, *agnhost, *porter, *busybox, *kcm, *kubeVersion); err != nil {
		klog.ErrorS(err, "Writing the node's images failed")
		os.Exit(1)
	}
}

func run(out, pause, agnhost, porter, busybox, kcm, kubeVersion string) error {
	if out == "" || pause == "" || agnhost == "" || porter == "" || busybox == "" || kcm == "" || kubeVersion == "" {
		return fmt.Errorf("-out, -pause, -agnhost, -agnhost-porter, -busybox, -kube-controller-manager and -kube-version are all required")
	}
	busyboxImage, err := busyboxImage(busybox)
	if err != nil {
		return err
	}
	agnhostCurrent := agnhostImage(AgnhostImage, agnhost, porter, busyboxImage.files)
	agnhostPrev := agnhostImage(AgnhostPrevImage, agnhost, porter, busyboxImage.files)
	kcmFiles, err := withLibraries("usr/local/bin/kube-controller-manager", kcm)
	if err != nil {
		return err
	}
	images := map[string]image{
		"pause":        {ref: PauseImage, files: []imageFile{binary("pause", pause)}, entrypoint: []string{"/pause"}},
		"agnhost":      agnhostCurrent,
		"agnhost-prev": agnhostPrev,
		"busybox":      busyboxImage,
		"kube-controller-manager": {ref: KubeControllerManagerImage + kubeVersion, files: kcmFiles,
			entrypoint: []string{"/usr/local/bin/kube-controller-manager"}},
	}
	for name, img := range images {
		if err := img.load(); err != nil {
			return fmt.Errorf("image %s: %w", img.ref, err)
		}
		archive, err := img.archive()
		if err != nil {
			return fmt.Errorf("image %s: %w", img.ref, err)
		}
		if err := os.WriteFile(filepath.Join(out, name+".tar"), archive, 0o644); err != nil {
			return fmt.Errorf("writing image %s: %w", img.ref, err)
		}
		klog.InfoS("Wrote image", "image", img.ref, "archive", filepath.Join(out, name+".tar"), "bytes", len(archive))
	}
	return nil
}

// binary is a file read from path at load time.
func binary(name, path string) imageFile { return imageFile{name: name, mode: 0o755, link: "@" + path} }

// busyboxImage is busybox at /bin/busybox with a link per applet, and sh as
// its command, as upstream's image has.
func busyboxImage(path string) (image, error) {
	list, err := exec.Command(path, "--list").Output()
	if err != nil {
		return image{}, fmt.Errorf("listing busybox's applets: %w", err)
	}
	files := []imageFile{binary("bin/busybox", path), {name: "tmp", mode: 0o1777, dir: true}, {name: "etc/passwd", mode: 0o644,
		data: []byte("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n")},
		{name: "etc/group", mode: 0o644, data: []byte("root:x:0:\nnogroup:x:65534:\n")}}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" {
			files = append(files, imageFile{name: "bin/" + applet, mode: 0o777, link: "busybox"})
		}
	}
	return image{ref: BusyboxImage, files: files, cmd: []string{"sh"}}, nil
}

// agnhostImage is upstream's agnhost image as far as the tests use it:
// /agnhost (and agnhost-2) with pause as its command, porter's
// certificate and key at the root (test-webserver serves them to
// readiness probes), the user and group the SupplementalGroups tests name,
// /uploads for netexec, and busybox's shell and tools where upstream's
// Alpine base has them (tests exec sh, mv, cat, nc, wget).
func agnhostImage(ref, agnhost, porter string, busybox []imageFile) image {
	files := []imageFile{binary("agnhost", agnhost), {name: "agnhost-2", mode: 0o777, link: "agnhost"},
		binary("localhost.crt", filepath.Join(porter, "localhost.crt")), binary("localhost.key", filepath.Join(porter, "localhost.key")),
		{name: "uploads", mode: 0o755, dir: true}}
	for _, f := range busybox {
		switch f.name {
		case "etc/passwd":
			f.data = append(slices.Clone(f.data), "user-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n"...)
		case "etc/group":
			f.data = append(slices.Clone(f.data), "user-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n"...)
		}
		files = append(files, f)
	}
	return image{ref: ref, files: files, entrypoint: []string{"/agnhost"}, cmd: []string{"pause"}}
}

// withLibraries is a binary at name and, when it is dynamically linked,
// the shared libraries ldd says it loads, at their paths on this machine.
// The Makefile builds it static, as Kubernetes releases it; a bin/ built
// by an older Makefile holds it linked against libc.
func withLibraries(name, path string) ([]imageFile, error) {
	dynamic, err := isDynamic(path)
	if err != nil {
		return nil, err
	}
	if !dynamic {
		return []imageFile{binary(name, path)}, nil
	}
	out, err := exec.Command("ldd", path).Output()
	if err != nil {
		return nil, fmt.Errorf("listing the libraries of %s: %w", path, err)
	}
	files := []imageFile{binary(name, path)}
	for _, line := range strings.Split(string(out), "\n") {
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
		// "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
		fields := strings.Fields(line)
		for _, f := range fields {
			if strings.HasPrefix(f, "/") {
				resolved, err := filepath.EvalSymlinks(f)
				if err != nil {
					return nil, fmt.Errorf("library %s of %s: %w", f, path, err)
				}
				files = append(files, binary(strings.TrimPrefix(f, "/"), resolved))
				break
			}
		}
	}
	return files, nil
}

// isDynamic says whether the ELF binary at path asks for a dynamic
// loader (a PT_INTERP header), which a static binary has none of.
func isDynamic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, fmt.Errorf("reading the ELF headers of %s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

// load reads the files named by path ("@path" in link).
func (img *image) load() error {
	for i, f := range img.files {
		if path, ok := strings.CutPrefix(f.link, "@"); ok {
			data, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("reading %s: %w", path, err)
			}
			img.files[i].data, img.files[i].link = data, ""
		}
	}
	return nil
}

// archive is the image as an OCI layout in one tar.
func (img image) archive() ([]byte, error) {
	layer, err := img.layer()
	if err != nil {
		return nil, err
	}
	layerDigest := digest(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": img.entrypoint, "Cmd": img.cmd, "Env": []string{defaultPath}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return nil, err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config, nil),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer, nil)},
	})
	if err != nil {
		return nil, err
	}
	tag := img.ref[strings.LastIndex(img.ref, ":")+1:]
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests": []any{descriptor("application/vnd.oci.image.manifest.v1+json", manifest, map[string]string{
			"io.containerd.image.name":          img.ref,
			"org.opencontainers.image.ref.name": tag,
		})},
	})
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	entries := []imageFile{
		{name: "oci-layout", data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", data: index},
	}
	for _, blob := range [][]byte{layer, config, manifest} {
		entries = append(entries, imageFile{name: "blobs/sha256/" + strings.TrimPrefix(digest(blob), "sha256:"), data: blob})
	}
	for _, e := range entries {
		e.mode = 0o644
		if err := writeEntry(w, e); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), w.Close()
}

// layer is the image's files as one tar, with the folders they need.
func (img image) layer() ([]byte, error) {
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	folders := map[string]bool{}
	for _, f := range img.files {
		for dir := filepath.Dir(f.name); dir != "." && !folders[dir]; dir = filepath.Dir(dir) {
			folders[dir] = true
			if err := writeEntry(w, imageFile{name: dir, mode: 0o755, dir: true}); err != nil {
				return nil, err
			}
		}
		if err := writeEntry(w, f); err != nil {
			return nil, err
		}
	}
	return buf.Bytes(), w.Close()
}

// writeEntry writes a file, a link or a folder.
func writeEntry(w *tar.Writer, f imageFile) error {
	header := &tar.Header{Name: f.name, Mode: f.mode, Typeflag: tar.TypeReg, Size: int64(len(f.data))}
	switch {
	case f.link != "":
		header.Typeflag, header.Linkname, header.Size = tar.TypeSymlink, f.link, 0
	case f.dir:
		header.Typeflag, header.Name = tar.TypeDir, f.name+"/"
	}
	if err := w.WriteHeader(header); err != nil {
		return fmt.Errorf("writing %s: %w", f.name, err)
	}
	if _, err := w.Write(f.data); err != nil {
		return fmt.Errorf("writing %s: %w", f.name, err)
	}
	return nil
}

func digest(blob []byte) string {
	sum := sha256.Sum256(blob)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, blob []byte, annotations map[string]string) map[string]any {
	d := map[string]any{"mediaType": mediaType, "digest": digest(blob), "size": len(blob)}
	if annotations != nil {
		d["annotations"] = annotations
	}
	return d
}
