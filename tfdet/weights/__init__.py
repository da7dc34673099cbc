"""Weight files: `weights_file` decides once what a weights argument names (a Detectron .pkl, our .weights.h5, a
training checkpoint) and loads it; `download` fetches Detectron's URLs and maskrcnn-benchmark `catalog://` names into
the checked cache. Submodules are imported by name; importing this package imports nothing."""
