"""What the tests share, imported as `from support.<module> import ...`: tests/ is on sys.path (pytest puts it
there for tests/conftest.py and the test modules, which sit in a folder without `__init__.py`; a child process
that imports a test module inserts it itself, as `child_processes.run_in_children` does). No test module
imports another test module or conftest (tests/test_import_structure.py checks it).

- paths: the repository root, ../shared and `shared_path`.
- Fixtures and inputs: detectron_fixtures (Detectron weight files and §2's blob inventories of the zoo
  models), benchmark_checkpoints (maskrcnn-benchmark checkpoints), porting_fixtures (scratch folders, variable
  checks, a blob's Keras layout), porting_source (the porting tests' model), retinanet_fixtures,
  savedmodel_fixtures, training_fixtures, fork_configs (the DA fork's YAML files), dataset_sources (raw
  Cityscapes, KITTI and Sim10k inputs of `tfdet.data.convert`), video_fixtures.
- NumPy restatements of Detectron and Caffe2, written from their source and sharing no code with tfdet:
  numpy_reference (boxes, anchors, NMS, proposals, detections, image blob, keypoint decoding), numpy_roi_align,
  numpy_backbones, numpy_heads, numpy_training_reference, numpy_retinanet_training, numpy_detectron_postprocess,
  numpy_detectron_retinanet, numpy_detectron_test_time.
- Machinery: child_processes, strategy_equivalence, http_mirror (a Detectron download site on loopback),
  readme_blocks and readme_stand_ins (the README test's blocks and workspace).
"""
