package route

// Engine is what the choice of an engine needs of one: its name and its
// kind.
type Engine interface {
	Name() string
	Kind() string
}

// ImageEngine is the engine of images an image request goes to: the one
// named name if name is not "", or else the first of kind (the kind its
// route belongs to), or else, with anyKind (a route of no kind, sent as
// image work by the handler's class), the first of all. The zero E if
// there is no such engine.
func ImageEngine[E Engine](images []E, name, kind string, anyKind bool) E {
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
	var none E
	return none
}

// ImageEngineNamed is the engine of images named name, or the zero E.
func ImageEngineNamed[E Engine](images []E, name string) E {
	for _, e := range images {
		if e.Name() == name {
			return e
		}
	}
	var none E
	return none
}
