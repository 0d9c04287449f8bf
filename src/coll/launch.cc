// STUB: launcher detection arrives in its own commit.
#include "remora/launch.h"
