"""The label map a SavedModel carries as assets: `assets/labels.json` (every class: id, name, dataset id) and
`assets/label_map.pbtxt` (the TF Object Detection API's StringIntLabelMap text, for its tools and clients).

Both key classes by the contiguous id that `detection_classes` returns; `detection_class_names` gives the
same names in the graph. Classes without a known name are called `id<c>`, as pictures and COCO json name
them (Detectron's `get_class_string`), and labels.json says `"names_known": false`.
"""

import json
import pathlib

LABELS_FILE = "labels.json"
PBTXT_FILE = "label_map.pbtxt"


def class_name_table(categories):
    """The name of each class id, for the graph's lookup: index 0 (background, and the padding rows'
    class 0) is the empty string."""
    return ("",) + categories.display_names()[1:]


def labels_json(categories):
    """labels.json's content: {"names_known", "classes": [{"id", "name", "dataset_id"}, ...]}."""
    names = categories.display_names()
    classes = [
        {"id": c, "name": names[c], "dataset_id": int(categories.json_ids[c])} for c in range(1, len(names))
    ]
    return {"names_known": categories.names is not None, "classes": classes}


def label_map_pbtxt(categories):
    """label_map.pbtxt's content: one `item { id name display_name }` per class."""
    names = categories.display_names()
    items = []
    for c in range(1, len(names)):
        quoted = _quoted(names[c])
        items.append(f"item {{\n  id: {c}\n  name: {quoted}\n  display_name: {quoted}\n}}\n")
    return "".join(items)


def _quoted(text):
    """A protobuf text-format string literal (UTF-8 kept as is)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def write_label_map(folder, categories):
    """Write labels.json and label_map.pbtxt into `folder`; returns their paths."""
    folder = pathlib.Path(folder)
    labels, pbtxt = folder / LABELS_FILE, folder / PBTXT_FILE
    labels.write_text(json.dumps(labels_json(categories), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    pbtxt.write_text(label_map_pbtxt(categories), encoding="utf-8")
    return labels, pbtxt
