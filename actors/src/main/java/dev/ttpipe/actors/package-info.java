/** ttpipe actors. */
package dev.ttpipe.actors;
