#!/usr/bin/python3
"""A real (small) PyTorch training loop fed by gpufeed or by torch's DataLoader.

    python examples/train_pytorch.py --data benchmarks/data/demo-recordio-2000 --loader gpufeed
    python examples/train_pytorch.py --data benchmarks/data/demo-imagefolder-2000 --loader torch
    torchrun --nproc_per_node=2 examples/train_pytorch.py --data ... --loader gpufeed

Trains torchvision's resnet18 at a low resolution for a few steps, on CUDA
when present, else on the CPU (gloo for the process group under torchrun).
Under torchrun each process reads its own half of every epoch: gpufeed takes
the rank and world size from torch.distributed, as DistributedSampler does.
(Debian 12's torch 1.13 launcher fails on Python 3.11; starting each process
with RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set does the same.)
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torchvision

import gpufeed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="packed dataset (gpufeed) or ImageFolder")
    parser.add_argument("--loader", choices=("gpufeed", "torch"), default="gpufeed")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--report", default=None, help="write what this rank saw as JSON here")
    args = parser.parse_args()

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) \
        if torch.cuda.is_available() else torch.device("cpu")
    if distributed:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if distributed else 0

    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    if args.loader == "gpufeed":
        # The swap: the class name, the packed path, and the transform; torch's
        # keywords (num_workers, persistent_workers, pin_memory, ...) stay.
        loader = gpufeed.DataLoader(args.data, batch_size=args.batch_size, shuffle=True, seed=0,
                                    num_workers=2, persistent_workers=True,
                                    pin_memory=device.type == "cuda",
                                    transform=gpufeed.ImageTransform(args.size, train=True,
                                                                     mean=mean, std=std))
        classes = gpufeed.open_dataset(args.data).classes or []
    else:
        from torchvision import transforms
        dataset = torchvision.datasets.ImageFolder(args.data, transform=transforms.Compose([
            transforms.RandomResizedCrop(args.size), transforms.RandomHorizontalFlip(),
            transforms.ToTensor(), transforms.Normalize(mean, std)]))
        sampler = torch.utils.data.distributed.DistributedSampler(dataset) if distributed else None
        loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size,
                                             shuffle=sampler is None, sampler=sampler,
                                             num_workers=2, persistent_workers=True)
        classes = dataset.classes

    model = torchvision.models.resnet18(num_classes=max(2, len(classes))).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_function = torch.nn.CrossEntropyLoss()

    seen_labels = []
    step = 0
    started = time.perf_counter()
    while step < args.steps:
        for images, labels in loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            loss = loss_function(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            seen_labels.extend(int(x) for x in labels.cpu())
            step += 1
            if rank == 0:
                print(f"step {step}: loss {loss.item():.3f}")
            if step >= args.steps:
                break
    seconds = time.perf_counter() - started
    images_per_s = len(seen_labels) / seconds
    print(f"rank {rank}: {len(seen_labels)} images in {seconds:.1f} s = {images_per_s:.1f} images/s "
          f"({args.loader}, {device})")
    if args.loader == "gpufeed" and rank == 0:
        print(loader.stats())
    if args.report:
        with open(f"{args.report}.{rank}", "w") as out:
            json.dump({"rank": rank, "labels": seen_labels,
                       "batches": len(loader), "images_per_s": images_per_s}, out)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
