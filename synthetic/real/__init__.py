"""Real concept datasets read from their own published layouts (CUB-200-2011, ...).

Nothing is downloaded: each reader takes a user-given ``data.root`` holding the dataset as its
publisher ships it, checks the layout up front (a missing file, a bad line or an image that does not
open is one line naming the file, before any training) and returns the same
:class:`~synthetic.base.SyntheticData` every generator returns, so every command works on it
unchanged. :mod:`synthetic.real.fixtures` writes tiny datasets in the exact layouts for tests.
"""
