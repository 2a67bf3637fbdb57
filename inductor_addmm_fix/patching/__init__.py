"""The machinery: slots, patches and their registry, declarations, generic probes and
post-import hooks.  It knows no patch.  (Imported at interpreter start-up for the
import hooks: this file imports nothing.)"""
