import GIO
