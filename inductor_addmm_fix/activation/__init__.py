"""How the package gets applied with no change to user code: the torch.backends entry
point, the .pth start-up line, the import of the package, all gated by the environment
variable INDUCTOR_ADDMM_FIX; and which of those routes a fresh interpreter would take.
(Imported at interpreter start-up: this file imports nothing.)"""
