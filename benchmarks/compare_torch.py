#!/usr/bin/python3
"""gpufeed.DataLoader against torch.utils.data.DataLoader, same data, same cores.

    compare_torch.py --folder benchmarks/data/demo-imagefolder-2000 \
        --packed benchmarks/data/demo-recordio-2000 [--epochs 2] [--json out.json]

torch: torchvision.datasets.ImageFolder + RandomResizedCrop(224) +
RandomHorizontalFlip + ToTensor + Normalize, num_workers = cores,
persistent_workers=True. gpufeed: the packed RecordIO of the same images, the
same transform in C++ (float32 NCHW normalized), num_threads = cores. Both
give batches of 128 on the CPU, page cache warm; one warm-up epoch each, then
the median images/s over the measured epochs. The targets (--target): gpufeed
>= 3x torch on the photo set, >= 4x on the demo set.
"""

import argparse
import json
import os
import statistics
import sys
import time


def progress_bar(total, desc):
    """A tqdm bar on stderr when there is a terminal and tqdm, else None.
    Updated once per batch: negligible next to a batch of 128 decodes."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc=desc, unit="batch", leave=False) if sys.stderr.isatty() else None


def measure(loader, epochs, set_epoch=None, desc="loader"):
    rates = []
    bar = progress_bar((epochs + 1) * len(loader), desc)
    for epoch in range(epochs + 1):  # the first is warm-up
        if set_epoch:
            set_epoch(epoch)
        images = 0
        started = time.perf_counter()
        for batch, _ in loader:
            images += batch.shape[0]
            if bar is not None:
                bar.update()
        seconds = time.perf_counter() - started
        if epoch > 0:
            rates.append(images / seconds)
    if bar is not None:
        bar.close()
    return statistics.median(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True)
    parser.add_argument("--packed", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--json", default=None)
    parser.add_argument("--label", default="demo", help="the dataset's name in the output")
    parser.add_argument("--target", type=float, default=3.0,
                        help="the ratio to meet (the decode-speed issue: 3 on photos, 4 on the demo)")
    args = parser.parse_args()
    try:
        import torch
        import torchvision
        from torchvision import transforms
    except ImportError as error:
        print(f"torch/torchvision not importable ({error}): skipping the comparison")
        return 0
    import gpufeed

    cores = len(os.sched_getaffinity(0))
    torch.set_num_threads(1)
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    dataset = torchvision.datasets.ImageFolder(args.folder, transform=transforms.Compose([
        transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(mean, std)]))
    torch_loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True,
                                               num_workers=cores, persistent_workers=True)
    torch_rate = measure(torch_loader, args.epochs, desc="torch DataLoader")
    del torch_loader

    ours = gpufeed.DataLoader(args.packed, batch_size=args.batch, shuffle=True,
                              num_threads=cores,
                              transform=gpufeed.ImageTransform(224, train=True, mean=mean, std=std))
    our_rate = measure(ours, args.epochs, ours.set_epoch, desc="gpufeed.DataLoader")
    stats = ours.stats()
    ratio = our_rate / torch_rate
    print(f"{'loader (' + args.label + ')':<58} {'images/s':>9}")
    print(f"{'torch DataLoader (ImageFolder, %d workers)' % cores:<58} {torch_rate:>9.0f}")
    print(f"{'gpufeed.DataLoader (packed RecordIO, %d threads)' % cores:<58} {our_rate:>9.0f}")
    print(f"ratio gpufeed / torch ({args.label}): {ratio:.2f}x (target >= {args.target:g}x: "
          f"{'met' if ratio >= args.target else 'MISSED'})")
    print(f"gpufeed verdict: {stats['verdict']}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as out:
            json.dump({"dataset": args.label, "target": args.target,
                       "cores": cores, "batch": args.batch, "torch_images_per_s": torch_rate,
                       "gpufeed_images_per_s": our_rate, "ratio": ratio,
                       "verdict": stats["verdict"]}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
