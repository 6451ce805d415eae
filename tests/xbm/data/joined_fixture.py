"""A data set that spawned test workers import cheaply (torch only): two data sets' seeded items, one after the
other (torch's ConcatDataset takes no ``(i, seed)`` item), so one loader reads both."""
from torch.utils.data import Dataset


class Joined(Dataset):
    def __init__(self, first: Dataset, second: Dataset) -> None:
        self.first, self.second = first, second

    def __len__(self) -> int:
        return len(self.first) + len(self.second)

    def __getitem__(self, item):
        i, seed = item
        n = len(self.first)
        return self.first[(i, seed)] if i < n else self.second[(i - n, seed)]
