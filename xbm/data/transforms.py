"""The default image transform, used until the trainer sets its timm transforms."""
from __future__ import annotations

# ImageNet statistics, as timm's IMAGENET_DEFAULT_MEAN / _STD (pretrained backbones expect them).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def default_image_transform(image_size: int):
    """PIL RGB -> float tensor [3, image_size, image_size]: plain resize (no crop, no augmentation),
    ToTensor, ImageNet normalisation."""
    from torchvision import transforms as T  # here: vector data sets never pay torchvision's import

    return T.Compose([
        T.Resize((image_size, image_size)),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])
