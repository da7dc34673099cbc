"""Legacy weight porting: safe readers of Detectron `.pkl` / maskrcnn-benchmark `.pth` files."""
