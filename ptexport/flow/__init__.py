"""Instruction flow: walking traced code over images, the block cache, ptxed-style output."""
