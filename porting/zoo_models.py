"""Detectron's trained models, as its MODEL_ZOO.md (12_2017_baselines, 74 models) and projects/GN/README.md (the 4 GN
models it links) list them: read from facebookresearch/Detectron at commit 04155a01 (the repository's last).

Each row: the config's YAML name, the task, box / mask / keypoint AP and proposal AR@1000 as the table gives them
(None where it shows "-"; keypoint rows are person-only, the X-152 row is with its test-time augmentation), the
model id and the path of its `model_final.pkl` below Detectron's download base (so a mirror's base works too).
No two rows share a name: the RPN rows are `rpn_*` and `rpn_person_only_*`, those on precomputed proposals
`fast_rcnn_*` / `mask_rcnn_*` / `keypoint_rcnn_*`, the end-to-end ones `e2e_*`, the GN ones end in `_gn`.
The tables give no download sizes: `python -m porting zoo --list --sizes` asks the server.
GN's "scratch" models and its BN rows are left out: the README links no file for the former, and the latter are
MODEL_ZOO.md's e2e_mask_rcnn_R-{50,101}-FPN_2x.
"""

import dataclasses
import difflib

from tfdet.weights.download import DETECTRON_BASE_URL, download_root


@dataclasses.dataclass(frozen=True)
class ZooModel:
    """One trained model of Detectron's zoo."""

    name: str
    task: str
    box_ap: float | None
    mask_ap: float | None
    keypoint_ap: float | None
    proposal_ar: float | None
    model_id: int
    path: str  # below Detectron's base, https://dl.fbaipublicfiles.com/detectron

    @property
    def url(self) -> str:
        """Its model_final.pkl at Detectron's base (tfdet.weights.download fetches it from
        $TFDET_DETECTRON_URL if set)."""
        return f"{DETECTRON_BASE_URL}/{self.path}"


ZOO_MODELS = (
    # MODEL_ZOO.md
    ZooModel('rpn_R-50-C4_1x', 'RPN', None, None, None, 51.6, 35998355,
             '35998355/12_2017_baselines/rpn_R-50-C4_1x.yaml.08_00_43.njH5oD9L/output/train/coco_2014_train%3Acoco_2014_valminusminival/rpn/model_final.pkl'),
    ZooModel('rpn_R-50-FPN_1x', 'RPN', None, None, None, 57.2, 35998814,
             '35998814/12_2017_baselines/rpn_R-50-FPN_1x.yaml.08_06_03.Axg0r179/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('rpn_R-101-FPN_1x', 'RPN', None, None, None, 58.2, 35998887,
             '35998887/12_2017_baselines/rpn_R-101-FPN_1x.yaml.08_07_07.vzhHEs0V/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('rpn_X-101-64x4d-FPN_1x', 'RPN', None, None, None, 59.4, 35998956,
             '35998956/12_2017_baselines/rpn_X-101-64x4d-FPN_1x.yaml.08_08_41.Seh0psKz/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('rpn_X-101-32x8d-FPN_1x', 'RPN', None, None, None, 59.5, 36760102,
             '36760102/12_2017_baselines/rpn_X-101-32x8d-FPN_1x.yaml.06_00_16.RWeBAniO/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_R-50-C4_1x', 'Fast R-CNN (precomputed proposals)', 34.4, None, None, None, 36224013,
             '36224013/12_2017_baselines/fast_rcnn_R-50-C4_1x.yaml.08_22_00.vHd5BeBP/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_R-50-C4_2x', 'Fast R-CNN (precomputed proposals)', 35.6, None, None, None, 36224046,
             '36224046/12_2017_baselines/fast_rcnn_R-50-C4_2x.yaml.08_22_57.XFxNqEnL/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_R-50-FPN_1x', 'Fast R-CNN (precomputed proposals)', 36.4, None, None, None, 36225147,
             '36225147/12_2017_baselines/fast_rcnn_R-50-FPN_1x.yaml.08_39_09.L3obSdQ2/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_R-50-FPN_2x', 'Fast R-CNN (precomputed proposals)', 36.8, None, None, None, 36225249,
             '36225249/12_2017_baselines/fast_rcnn_R-50-FPN_2x.yaml.08_40_18.zoChak1f/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_R-101-FPN_1x', 'Fast R-CNN (precomputed proposals)', 38.5, None, None, None, 36228880,
             '36228880/12_2017_baselines/fast_rcnn_R-101-FPN_1x.yaml.09_25_03.tZuHkSpl/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_R-101-FPN_2x', 'Fast R-CNN (precomputed proposals)', 39.0, None, None, None, 36228933,
             '36228933/12_2017_baselines/fast_rcnn_R-101-FPN_2x.yaml.09_26_27.jkOUTrrk/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_X-101-64x4d-FPN_1x', 'Fast R-CNN (precomputed proposals)', 40.4, None, None, None, 36226250,
             '36226250/12_2017_baselines/fast_rcnn_X-101-64x4d-FPN_1x.yaml.08_54_22.u0LaxQsC/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_X-101-64x4d-FPN_2x', 'Fast R-CNN (precomputed proposals)', 39.8, None, None, None, 36226326,
             '36226326/12_2017_baselines/fast_rcnn_X-101-64x4d-FPN_2x.yaml.08_55_54.2F7MP1CD/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_X-101-32x8d-FPN_1x', 'Fast R-CNN (precomputed proposals)', 40.6, None, None, None, 37119777,
             '37119777/12_2017_baselines/fast_rcnn_X-101-32x8d-FPN_1x.yaml.06_38_03.d5N36egm/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('fast_rcnn_X-101-32x8d-FPN_2x', 'Fast R-CNN (precomputed proposals)', 39.7, None, None, None, 37121469,
             '37121469/12_2017_baselines/fast_rcnn_X-101-32x8d-FPN_2x.yaml.07_03_53.EPrHk63L/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_R-50-C4_1x', 'Mask R-CNN (precomputed proposals)', 35.5, 31.3, None, None, 36224121,
             '36224121/12_2017_baselines/mask_rcnn_R-50-C4_1x.yaml.08_24_37.wdU8r5Jo/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_R-50-C4_2x', 'Mask R-CNN (precomputed proposals)', 36.9, 32.5, None, None, 36224151,
             '36224151/12_2017_baselines/mask_rcnn_R-50-C4_2x.yaml.08_25_34.RSN5CVSH/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_R-50-FPN_1x', 'Mask R-CNN (precomputed proposals)', 37.3, 33.7, None, None, 36225401,
             '36225401/12_2017_baselines/mask_rcnn_R-50-FPN_1x.yaml.08_42_04.MocEgrRW/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_R-50-FPN_2x', 'Mask R-CNN (precomputed proposals)', 37.7, 34.0, None, None, 36225732,
             '36225732/12_2017_baselines/mask_rcnn_R-50-FPN_2x.yaml.08_43_08.gDqBz9zS/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_R-101-FPN_1x', 'Mask R-CNN (precomputed proposals)', 39.4, 35.6, None, None, 36229407,
             '36229407/12_2017_baselines/mask_rcnn_R-101-FPN_1x.yaml.09_38_04.zbVPo8ZE/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_R-101-FPN_2x', 'Mask R-CNN (precomputed proposals)', 40.0, 35.9, None, None, 36229740,
             '36229740/12_2017_baselines/mask_rcnn_R-101-FPN_2x.yaml.09_39_00.Z7O7zOEC/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_X-101-64x4d-FPN_1x', 'Mask R-CNN (precomputed proposals)', 41.3, 37.0, None, None, 36226382,
             '36226382/12_2017_baselines/mask_rcnn_X-101-64x4d-FPN_1x.yaml.08_56_59.rUCejrBN/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_X-101-64x4d-FPN_2x', 'Mask R-CNN (precomputed proposals)', 41.1, 36.6, None, None, 36672114,
             '36672114/12_2017_baselines/mask_rcnn_X-101-64x4d-FPN_2x.yaml.08_58_13.aNWCi3U7/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_X-101-32x8d-FPN_1x', 'Mask R-CNN (precomputed proposals)', 41.3, 37.0, None, None, 37121516,
             '37121516/12_2017_baselines/mask_rcnn_X-101-32x8d-FPN_1x.yaml.07_04_58.CbM22DZg/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('mask_rcnn_X-101-32x8d-FPN_2x', 'Mask R-CNN (precomputed proposals)', 40.7, 36.3, None, None, 37121596,
             '37121596/12_2017_baselines/mask_rcnn_X-101-32x8d-FPN_2x.yaml.07_05_48.TL22uFaK/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_R-50-C4_1x', 'Faster R-CNN', 34.8, None, None, None, 35857197,
             '35857197/12_2017_baselines/e2e_faster_rcnn_R-50-C4_1x.yaml.01_33_49.iAX0mXvW/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_R-50-C4_2x', 'Faster R-CNN', 36.5, None, None, None, 35857281,
             '35857281/12_2017_baselines/e2e_faster_rcnn_R-50-C4_2x.yaml.01_34_56.ScPH0Z4r/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_R-50-FPN_1x', 'Faster R-CNN', 36.7, None, None, None, 35857345,
             '35857345/12_2017_baselines/e2e_faster_rcnn_R-50-FPN_1x.yaml.01_36_30.cUF7QR7I/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_R-50-FPN_2x', 'Faster R-CNN', 37.9, None, None, None, 35857389,
             '35857389/12_2017_baselines/e2e_faster_rcnn_R-50-FPN_2x.yaml.01_37_22.KSeq0b5q/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_R-101-FPN_1x', 'Faster R-CNN', 39.4, None, None, None, 35857890,
             '35857890/12_2017_baselines/e2e_faster_rcnn_R-101-FPN_1x.yaml.01_38_50.sNxI7sX7/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_R-101-FPN_2x', 'Faster R-CNN', 39.8, None, None, None, 35857952,
             '35857952/12_2017_baselines/e2e_faster_rcnn_R-101-FPN_2x.yaml.01_39_49.JPwJDh92/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_X-101-64x4d-FPN_1x', 'Faster R-CNN', 41.5, None, None, None, 35858015,
             '35858015/12_2017_baselines/e2e_faster_rcnn_X-101-64x4d-FPN_1x.yaml.01_40_54.1xc565DE/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_X-101-64x4d-FPN_2x', 'Faster R-CNN', 40.8, None, None, None, 35858198,
             '35858198/12_2017_baselines/e2e_faster_rcnn_X-101-64x4d-FPN_2x.yaml.01_41_46.CX2InaoG/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_X-101-32x8d-FPN_1x', 'Faster R-CNN', 41.3, None, None, None, 36761737,
             '36761737/12_2017_baselines/e2e_faster_rcnn_X-101-32x8d-FPN_1x.yaml.06_31_39.5MIHi1fZ/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_faster_rcnn_X-101-32x8d-FPN_2x', 'Faster R-CNN', 40.6, None, None, None, 36761786,
             '36761786/12_2017_baselines/e2e_faster_rcnn_X-101-32x8d-FPN_2x.yaml.06_33_22.VqFNuxk6/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-50-C4_1x', 'Mask R-CNN', 35.8, 31.4, None, None, 35858791,
             '35858791/12_2017_baselines/e2e_mask_rcnn_R-50-C4_1x.yaml.01_45_57.ZgkA7hPB/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-50-C4_2x', 'Mask R-CNN', 37.8, 32.8, None, None, 35858828,
             '35858828/12_2017_baselines/e2e_mask_rcnn_R-50-C4_2x.yaml.01_46_47.HBThTerB/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-50-FPN_1x', 'Mask R-CNN', 37.7, 33.9, None, None, 35858933,
             '35858933/12_2017_baselines/e2e_mask_rcnn_R-50-FPN_1x.yaml.01_48_14.DzEQe4wC/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-50-FPN_2x', 'Mask R-CNN', 38.6, 34.5, None, None, 35859007,
             '35859007/12_2017_baselines/e2e_mask_rcnn_R-50-FPN_2x.yaml.01_49_07.By8nQcCH/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-101-FPN_1x', 'Mask R-CNN', 40.0, 35.9, None, None, 35861795,
             '35861795/12_2017_baselines/e2e_mask_rcnn_R-101-FPN_1x.yaml.02_31_37.KqyEK4tT/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-101-FPN_2x', 'Mask R-CNN', 40.9, 36.4, None, None, 35861858,
             '35861858/12_2017_baselines/e2e_mask_rcnn_R-101-FPN_2x.yaml.02_32_51.SgT4y1cO/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_X-101-64x4d-FPN_1x', 'Mask R-CNN', 42.4, 37.5, None, None, 36494496,
             '36494496/12_2017_baselines/e2e_mask_rcnn_X-101-64x4d-FPN_1x.yaml.07_50_11.fkwVtEvg/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_X-101-64x4d-FPN_2x', 'Mask R-CNN', 42.2, 37.2, None, None, 35859745,
             '35859745/12_2017_baselines/e2e_mask_rcnn_X-101-64x4d-FPN_2x.yaml.02_00_30.ESWbND2w/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_X-101-32x8d-FPN_1x', 'Mask R-CNN', 42.1, 37.3, None, None, 36761843,
             '36761843/12_2017_baselines/e2e_mask_rcnn_X-101-32x8d-FPN_1x.yaml.06_35_59.RZotkLKI/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_X-101-32x8d-FPN_2x', 'Mask R-CNN', 41.7, 36.9, None, None, 36762092,
             '36762092/12_2017_baselines/e2e_mask_rcnn_X-101-32x8d-FPN_2x.yaml.06_37_59.DM5gJYRF/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('retinanet_R-50-FPN_1x', 'RetinaNet', 35.7, None, None, None, 36768636,
             '36768636/12_2017_baselines/retinanet_R-50-FPN_1x.yaml.08_29_48.t4zc9clc/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('retinanet_R-50-FPN_2x', 'RetinaNet', 35.7, None, None, None, 36768677,
             '36768677/12_2017_baselines/retinanet_R-50-FPN_2x.yaml.08_30_38.sgZIQZQ5/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('retinanet_R-101-FPN_1x', 'RetinaNet', 37.7, None, None, None, 36768744,
             '36768744/12_2017_baselines/retinanet_R-101-FPN_1x.yaml.08_31_38.5poQe1ZB/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('retinanet_R-101-FPN_2x', 'RetinaNet', 37.8, None, None, None, 36768840,
             '36768840/12_2017_baselines/retinanet_R-101-FPN_2x.yaml.08_33_29.grtM0RTf/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('retinanet_X-101-64x4d-FPN_1x', 'RetinaNet', 39.8, None, None, None, 36768875,
             '36768875/12_2017_baselines/retinanet_X-101-64x4d-FPN_1x.yaml.08_34_37.FSXgMpzP/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('retinanet_X-101-64x4d-FPN_2x', 'RetinaNet', 39.2, None, None, None, 36768907,
             '36768907/12_2017_baselines/retinanet_X-101-64x4d-FPN_2x.yaml.08_35_40.pF3nzPpu/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('retinanet_X-101-32x8d-FPN_1x', 'RetinaNet', 39.5, None, None, None, 36769563,
             '36769563/12_2017_baselines/retinanet_X-101-32x8d-FPN_1x.yaml.08_42_05.06JTK6vJ/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('retinanet_X-101-32x8d-FPN_2x', 'RetinaNet', 38.6, None, None, None, 36769641,
             '36769641/12_2017_baselines/retinanet_X-101-32x8d-FPN_2x.yaml.08_42_55.sUPnwXI5/output/train/coco_2014_train%3Acoco_2014_valminusminival/retinanet/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x', 'Mask R-CNN (bells & whistles)', 48.1, 41.5, None, None, 37129812,
             '37129812/12_2017_baselines/e2e_mask_rcnn_X-152-32x8d-FPN-IN5k_1.44x.yaml.09_35_36.8pzTQKYK/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('rpn_person_only_R-50-FPN_1x', 'RPN (person)', None, None, None, 64.0, 35998996,
             '35998996/12_2017_baselines/rpn_person_only_R-50-FPN_1x.yaml.08_10_08.0ZWmJm6F/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('rpn_person_only_R-101-FPN_1x', 'RPN (person)', None, None, None, 65.2, 35999521,
             '35999521/12_2017_baselines/rpn_person_only_R-101-FPN_1x.yaml.08_20_33.1OkqMmqP/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('rpn_person_only_X-101-64x4d-FPN_1x', 'RPN (person)', None, None, None, 65.9, 35999553,
             '35999553/12_2017_baselines/rpn_person_only_X-101-64x4d-FPN_1x.yaml.08_21_33.ghFzzArr/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('rpn_person_only_X-101-32x8d-FPN_1x', 'RPN (person)', None, None, None, 66.2, 36760438,
             '36760438/12_2017_baselines/rpn_person_only_X-101-32x8d-FPN_1x.yaml.06_04_23.M2oJlDPW/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_R-50-FPN_1x', 'Keypoint R-CNN (precomputed proposals)', 52.7, None, 64.1, None, 37651787,
             '37651787/12_2017_baselines/keypoint_rcnn_R-50-FPN_1x.yaml.20_00_48.UiwJsTXB/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_R-50-FPN_s1x', 'Keypoint R-CNN (precomputed proposals)', 53.4, None, 65.5, None, 37651887,
             '37651887/12_2017_baselines/keypoint_rcnn_R-50-FPN_s1x.yaml.20_01_40.FDjUQ7VX/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_R-101-FPN_1x', 'Keypoint R-CNN (precomputed proposals)', 53.5, None, 65.0, None, 37651996,
             '37651996/12_2017_baselines/keypoint_rcnn_R-101-FPN_1x.yaml.20_02_37.eVXnKM2Q/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_R-101-FPN_s1x', 'Keypoint R-CNN (precomputed proposals)', 54.6, None, 66.0, None, 37652016,
             '37652016/12_2017_baselines/keypoint_rcnn_R-101-FPN_s1x.yaml.20_03_32.z86wT97d/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_X-101-64x4d-FPN_1x', 'Keypoint R-CNN (precomputed proposals)', 55.8, None, 66.7, None, 37731079,
             '37731079/12_2017_baselines/keypoint_rcnn_X-101-64x4d-FPN_1x.yaml.16_40_56.wj7Hg7lX/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_X-101-64x4d-FPN_s1x', 'Keypoint R-CNN (precomputed proposals)', 56.3, None, 67.1, None, 37731142,
             '37731142/12_2017_baselines/keypoint_rcnn_X-101-64x4d-FPN_s1x.yaml.16_41_54.e1sD4Frh/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_X-101-32x8d-FPN_1x', 'Keypoint R-CNN (precomputed proposals)', 55.4, None, 66.2, None, 37730253,
             '37730253/12_2017_baselines/keypoint_rcnn_X-101-32x8d-FPN_1x.yaml.16_34_24.3G9OcQuR/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('keypoint_rcnn_X-101-32x8d-FPN_s1x', 'Keypoint R-CNN (precomputed proposals)', 55.9, None, 67.0, None, 37731010,
             '37731010/12_2017_baselines/keypoint_rcnn_X-101-32x8d-FPN_s1x.yaml.16_39_51.xt1oMzRk/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_R-50-FPN_1x', 'Keypoint R-CNN', 53.6, None, 64.2, None, 37697547,
             '37697547/12_2017_baselines/e2e_keypoint_rcnn_R-50-FPN_1x.yaml.08_42_54.kdzV35ao/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_R-50-FPN_s1x', 'Keypoint R-CNN', 54.3, None, 65.4, None, 37697714,
             '37697714/12_2017_baselines/e2e_keypoint_rcnn_R-50-FPN_s1x.yaml.08_44_03.qrQ0ph6M/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_R-101-FPN_1x', 'Keypoint R-CNN', 54.5, None, 64.8, None, 37697946,
             '37697946/12_2017_baselines/e2e_keypoint_rcnn_R-101-FPN_1x.yaml.08_45_06.Y14KqbST/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_R-101-FPN_s1x', 'Keypoint R-CNN', 55.3, None, 65.8, None, 37698009,
             '37698009/12_2017_baselines/e2e_keypoint_rcnn_R-101-FPN_s1x.yaml.08_45_57.YkrJgP6O/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_X-101-64x4d-FPN_1x', 'Keypoint R-CNN', 56.3, None, 66.0, None, 37732355,
             '37732355/12_2017_baselines/e2e_keypoint_rcnn_X-101-64x4d-FPN_1x.yaml.16_56_16.yv4t4W8N/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_X-101-64x4d-FPN_s1x', 'Keypoint R-CNN', 56.9, None, 66.8, None, 37732415,
             '37732415/12_2017_baselines/e2e_keypoint_rcnn_X-101-64x4d-FPN_s1x.yaml.16_57_48.Spqtq3Sf/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_X-101-32x8d-FPN_1x', 'Keypoint R-CNN', 56.0, None, 66.0, None, 37792158,
             '37792158/12_2017_baselines/e2e_keypoint_rcnn_X-101-32x8d-FPN_1x.yaml.16_54_16.LgZeo40k/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_keypoint_rcnn_X-101-32x8d-FPN_s1x', 'Keypoint R-CNN', 56.9, None, 67.0, None, 37732318,
             '37732318/12_2017_baselines/e2e_keypoint_rcnn_X-101-32x8d-FPN_s1x.yaml.16_55_09.Lx8H5JVu/output/train/keypoints_coco_2014_train%3Akeypoints_coco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    # projects/GN/README.md
    ZooModel('e2e_mask_rcnn_R-50-FPN_2x_gn', 'Mask R-CNN (GN)', 40.3, 35.7, None, None, 48616381,
             'GN/48616381/04_2018_gn_baselines/e2e_mask_rcnn_R-50-FPN_2x_gn_0416.13_23_38.bTlTI97Q/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-101-FPN_2x_gn', 'Mask R-CNN (GN)', 41.8, 36.8, None, None, 48616724,
             'GN/48616724/04_2018_gn_baselines/e2e_mask_rcnn_R-101-FPN_2x_gn_0416.13_26_34.GLnri4GR/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-50-FPN_3x_gn', 'Mask R-CNN (GN)', 40.8, 36.1, None, None, 48734751,
             'GN/48734751/04_2018_gn_baselines/e2e_mask_rcnn_R-50-FPN_3x_gn_0417.09_54_59.nwCTtPVk/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
    ZooModel('e2e_mask_rcnn_R-101-FPN_3x_gn', 'Mask R-CNN (GN)', 42.3, 37.2, None, None, 48734779,
             'GN/48734779/04_2018_gn_baselines/e2e_mask_rcnn_R-101-FPN_3x_gn_0417.09_55_23.HMtcR8wg/output/train/coco_2014_train%3Acoco_2014_valminusminival/generalized_rcnn/model_final.pkl'),
)  # fmt: skip

class ZooError(ValueError):
    """An unknown zoo name: one line with the closest names."""


def zoo_model(name) -> ZooModel:
    """The zoo model called `name` (a `.yaml` ending is allowed); ZooError naming the closest names otherwise."""
    models = {model.name: model for model in ZOO_MODELS}
    key = name.removesuffix(".yaml")
    if key in models:
        return models[key]
    closest = difflib.get_close_matches(key, list(models), n=3, cutoff=0.5)
    hint = f"closest: {', '.join(closest)}" if closest else "no close name"
    raise ZooError(f"{name!r} is not a Detectron zoo model ({hint}; python -m porting zoo --list lists all {len(models)})")


def cached_sizes() -> dict:
    """{name: bytes} of the zoo downloads already in tfdet's download cache."""
    root = download_root()
    files = {model.name: root.joinpath(*model.path.split("/")) for model in ZOO_MODELS}
    return {name: path.stat().st_size for name, path in files.items() if path.is_file()}


def format_zoo_table(models, sizes) -> str:
    """The zoo as a text table: name, task, box / mask / keypoint AP, proposal AR, size (`sizes`: name -> bytes)."""
    header = ("name", "task", "box AP", "mask AP", "kp AP", "prop AR", "size")
    rows = [header]
    for model in models:
        scores = (model.box_ap, model.mask_ap, model.keypoint_ap, model.proposal_ar)
        rows.append((model.name, model.task, *map(_number, scores), _size(sizes.get(model.name))))
    widths = [max(len(row[column]) for row in rows) for column in range(len(header))]
    left_aligned = 2  # name and task; the numbers are right-aligned
    return "\n".join(
        "  ".join(cell.ljust(width) if column < left_aligned else cell.rjust(width)
                  for column, (cell, width) in enumerate(zip(row, widths))).rstrip()
        for row in rows
    )  # fmt: skip


def _number(value):
    return "-" if value is None else f"{value:.1f}"


def _size(size):
    return "-" if size is None else f"{size / 2**20:.0f} MB"
