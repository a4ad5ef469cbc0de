package route

import "github.com/gpu-turnstile/caddy-gpu-turnstile/internal/engine"

// ImageEngine is the engine of images an image request goes to: the one
// named name if name is not "", or else the first of kind (the kind its
// route belongs to), or else, with anyKind (a route of no kind, sent as
// image work by the handler's class), the first of all. Nil if there is
// no such engine.
func ImageEngine(images []engine.Image, name, kind string, anyKind bool) engine.Image {
	if name != "" {
		return ImageEngineNamed(images, name)
	}
	for _, e := range images {
		if e.Kind() == kind {
			return e
		}
	}
	if kind == "" && anyKind && len(images) > 0 {
		return images[0]
	}
	return nil
}

// ImageEngineNamed is the engine of images named name, or nil.
func ImageEngineNamed(images []engine.Image, name string) engine.Image {
	for _, e := range images {
		if e.Name() == name {
			return e
		}
	}
	return nil
}
