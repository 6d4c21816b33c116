// tapegrad: the umbrella header a model includes.
#pragma once
